package sched

// Waiting is the number of requests queued for a model now (for the server's status).
func (s *Scheduler) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}
