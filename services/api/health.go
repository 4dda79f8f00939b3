package api

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	healthServiceName    = "grpc.health.v1.Health"
	healthCheckProcedure = "/" + healthServiceName + "/Check"
)

// healthHandler answers grpc.health.v1.Health/Check (over gRPC, gRPC-Web
// and Connect) with the generated messages of the standard health.proto:
// SERVING until the server drains. Only the empty service name and the
// API's own services are known. It needs no token.
func (s *Server) healthHandler() (string, http.Handler) {
	h := connect.NewUnaryHandler(healthCheckProcedure,
		func(_ context.Context, req *connect.Request[healthpb.HealthCheckRequest]) (*connect.Response[healthpb.HealthCheckResponse], error) {
			switch req.Msg.GetService() {
			case "", "orchard.v1.ClientService", "orchard.v1.WorkerService", "orchard.v1.DefinitionService",
				"orchard.v1.TenantService", "orchard.v1.AdminService":
			default:
				return nil, connect.NewError(connect.CodeNotFound, nil)
			}
			status := healthpb.HealthCheckResponse_SERVING
			if s.isDraining() {
				status = healthpb.HealthCheckResponse_NOT_SERVING
			}
			return connect.NewResponse(&healthpb.HealthCheckResponse{Status: status}), nil
		})
	return "/" + healthServiceName + "/", h
}

// healthz is the same check for plain HTTP probes.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if s.isDraining() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}
