// Package dbserver starts and stops a database server process on this
// machine: a PostgreSQL cluster from the machine's binaries, or a single
// in-memory CockroachDB node from a cockroach binary. `orchard dev`, the
// deployment rehearsal and the test database (internal/testdb) use it.
//
// It is production code: it must never import package testing, so that the
// orchard binary links no test code (a test of cmd/orchard checks this).
// Nothing here downloads anything.
package dbserver

// Server is a running database server that this process started, or one it
// was pointed at.
type Server struct {
	// URL reaches the server's administrative database.
	URL string
	// Cockroach is true when the server is CockroachDB.
	Cockroach bool

	stop func() error
}

// Stop shuts the server down and, for a throwaway server, removes its files.
// It is safe to call more than once.
func (s *Server) Stop() error {
	if s.stop == nil {
		return nil
	}
	stop := s.stop
	s.stop = nil
	return stop()
}

// External is a server someone else runs, at url; Stop leaves it alone.
func External(url string, cockroach bool) *Server {
	return &Server{URL: url, Cockroach: cockroach}
}
