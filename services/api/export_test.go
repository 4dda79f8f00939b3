package api

// AccessRules returns the roles of every procedure in the access table.
func AccessRules() map[string][]string {
	out := map[string][]string{}
	for p, a := range accessRules {
		for _, r := range a.roles {
			out[p] = append(out[p], string(r))
		}
	}
	return out
}

// ActiveLongPolls is the number of long polls waiting.
func (s *Server) ActiveLongPolls() int64 { return s.longPolls.Load() }

// EndWatches is the number of starts' end subscriptions kept.
func (s *Server) EndWatches() int {
	if s.ends == nil {
		return 0
	}
	return s.ends.len()
}
