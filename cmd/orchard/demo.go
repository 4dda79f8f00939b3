package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/orchardhq/orchard/pkg/engine"
	"github.com/orchardhq/orchard/pkg/sdk"
)

// startDemo registers the engine's example definitions through the API, runs
// SDK workers with demo activities for their task queues, and starts one
// orchestration of each, so that a newcomer sees them run. The returned
// function stops the workers.
func startDemo(ctx context.Context, out io.Writer, base, clientToken, workerToken, adminToken string) (stop func(), err error) {
	client := sdk.NewClient(base, sdk.WithToken(clientToken))
	admin := sdk.NewClient(base, sdk.WithToken(adminToken))
	for _, doc := range engine.Examples() {
		reg, err := admin.RegisterDefinition(ctx, doc)
		if err != nil {
			return nil, fmt.Errorf("demo: register: %w", err)
		}
		fmt.Fprintf(out, "demo: definition %s version %s\n", reg.Name, reg.Version)
	}

	workerClient := sdk.NewClient(base, sdk.WithToken(workerToken))
	logger := slog.New(slog.DiscardHandler)
	workers := map[string]*sdk.Worker{}
	queue := func(name string) *sdk.Worker {
		if workers[name] == nil {
			workers[name] = sdk.NewWorker(workerClient, name, sdk.WithLogger(logger))
		}
		return workers[name]
	}
	type anyMap = map[string]any
	sdk.Register(queue("warehouse"), "reserve-stock", func(_ context.Context, in anyMap) (anyMap, error) {
		return anyMap{"reservation_id": fmt.Sprintf("res-%v", in["order"])}, nil
	})
	sdk.Register(queue("warehouse"), "release-stock", func(_ context.Context, _ any) (any, error) { return nil, nil })
	sdk.Register(queue("warehouse"), "ship", func(_ context.Context, in anyMap) (anyMap, error) {
		return anyMap{"tracking": fmt.Sprintf("TRK-%v", in["order"])}, nil
	})
	sdk.Register(queue("payments"), "charge-card", func(_ context.Context, in anyMap) (anyMap, error) {
		return anyMap{"receipt": fmt.Sprintf("rcpt-%v", in["order"])}, nil
	})
	sdk.Register(queue("reports"), "build-report", func(_ context.Context, in anyMap) (anyMap, error) {
		return anyMap{"url": fmt.Sprintf("https://reports.example/%v/day-%v", in["tenant"], in["day"])}, nil
	})
	sdk.Register(queue("mail"), "send-mail", func(_ context.Context, _ any) (string, error) { return "sent", nil })
	sdk.Register(queue("media"), "list-images", func(_ context.Context, album string) (anyMap, error) {
		return anyMap{"images": []string{"beach.jpg", "hike.jpg", "sunset.jpg"}}, nil
	})
	sdk.Register(queue("media"), "resize", func(_ context.Context, in anyMap) (anyMap, error) {
		return anyMap{"url": fmt.Sprintf("https://cdn.example/%v@%v", in["image"], in["width"])}, nil
	})
	sdk.Register(queue("media"), "render-album-page", func(_ context.Context, _ any) (anyMap, error) {
		return anyMap{"url": "https://albums.example/summer"}, nil
	})

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := w.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				slog.Error("demo worker stopped", "error", err)
			}
		})
	}
	stop = func() {
		for _, w := range workers {
			_ = w.Stop(ctx)
		}
		cancel()
		wg.Wait()
	}

	starts := []struct {
		name, id string
		input    any
	}{
		{"order-fulfilment", "demo-order-1", map[string]any{
			"order_id": "1", "customer": "c-1", "total": 40, "address": "1 Main St",
			"lines": []any{map[string]any{"sku": "tea", "price": 20, "quantity": 2}},
		}},
		{"album-fan-out", "demo-album", map[string]any{"album": "summer"}},
		{"nightly-report", "demo-report", map[string]any{"day": 1, "last_day": 1, "tenant": "demo", "recipients": []string{"ops@example.com"}, "sent": 0}},
	}
	for _, s := range starts {
		id, err := client.Start(ctx, s.name, s.input, sdk.WithInstanceID(s.id))
		if err != nil && !errors.Is(err, sdk.ErrAlreadyExists) {
			stop()
			return nil, fmt.Errorf("demo: start %s: %w", s.name, err)
		}
		fmt.Fprintf(out, "demo: started %s (%s)\n", s.name, id)
	}
	return stop, nil
}
