package zkx

// counts returns how many probes ran and how many found a leader.
func (h *leaderFirst) counts() (probes, leaders int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.probes, h.leaders
}
