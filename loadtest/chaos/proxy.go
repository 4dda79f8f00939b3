package chaos

import (
	"context"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// dbProxy is the TCP proxy (toxiproxy, in this process) between the
// services and PostgreSQL: it cuts their connections and adds latency.
type dbProxy struct {
	proxy *toxiproxy.Proxy
}

// latencyToxics are the toxics a latency fault adds, one per direction.
var latencyToxics = []string{"chaos_latency_upstream", "chaos_latency_downstream"}

func startDBProxy(upstream string) (*dbProxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "postgres", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("database proxy: %w", err)
	}
	return &dbProxy{proxy: p}, nil
}

// addr is where the services connect.
func (d *dbProxy) addr() string { return d.proxy.Listen }

// cut closes every connection through the proxy and refuses new ones
// until restore.
func (d *dbProxy) cut() { d.proxy.Stop() }

// restore accepts connections again, on the same address.
func (d *dbProxy) restore() error { return d.proxy.Start() }

// addLatency delays what goes each way by ms ± jitter milliseconds.
func (d *dbProxy) addLatency(ms, jitter int) error {
	for _, name := range latencyToxics {
		stream := strings.TrimPrefix(name, "chaos_latency_")
		body := fmt.Sprintf(`{"name":%q,"type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`, name, stream, ms, jitter)
		if _, err := d.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return fmt.Errorf("latency toxic: %w", err)
		}
	}
	return nil
}

func (d *dbProxy) removeLatency() error {
	for _, name := range latencyToxics {
		if err := d.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
			return fmt.Errorf("latency toxic: %w", err)
		}
	}
	return nil
}

func (d *dbProxy) stop() { d.proxy.Stop() }
