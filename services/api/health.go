package api

import (
	"context"
	"net/http"

	"connectrpc.com/grpchealth"

	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// servedServices are the services the health service reports on, besides
// the whole server ("").
var servedServices = []string{
	orchardv1connect.ClientServiceName,
	orchardv1connect.WorkerServiceName,
	orchardv1connect.DefinitionServiceName,
	orchardv1connect.TenantServiceName,
	orchardv1connect.AdminServiceName,
}

// newHealth is the grpc.health.v1.Health service (Check and Watch, over
// gRPC, gRPC-Web and Connect; no token): SERVING for the server and each
// service until Drain. A Watch ends when Stop begins, so that an open
// watch never holds up the shutdown.
func (s *Server) newHealth() (string, http.Handler) {
	s.health = grpchealth.NewStaticChecker(servedServices...)
	s.health.SetStatus("", grpchealth.StatusServing)
	path, h := grpchealth.NewHandler(s.health)
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			select {
			case <-s.draining:
				cancel()
			case <-ctx.Done():
			}
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Drain makes the health service report NOT_SERVING, so that load balancers
// send no new calls, while the calls in flight and new ones still run. A
// process drains first, waits for the load balancers to notice, then
// Stops.
func (s *Server) Drain() {
	s.health.SetStatus("", grpchealth.StatusNotServing)
	for _, name := range servedServices {
		s.health.SetStatus(name, grpchealth.StatusNotServing)
	}
}
