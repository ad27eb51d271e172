package residency

// A backend that keeps copies of units in memory of its own (the MLX backend's expert
// slots, device arrays filled from the manager's buffers) reads a unit through the
// manager only when its copy is missing. Hit counts the uses its copies serve, so the
// counters and the policy's scores see every use, and Victim lets the manager's policy
// choose which copy to overwrite. The copies' bytes are the caller's to Pin.

// Hit counts a use of unit id served from a copy the caller holds: a hit, scored as
// an Acquire of a resident unit is.
func (m *Manager) Hit(id int) { m.HitUses(id, 1) }

// HitUses is Hit for uses picks of the unit served at once (AcquireUses).
func (m *Manager) HitUses(id, uses int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.units[id]
	m.tick++
	m.scorer.touch(&u.score, m.tick, uses)
	m.stats.Hits++
}

// Victim returns the index in ids of the unit the policy would evict first, -1 when
// ids is empty.
func (m *Manager) Victim(ids []int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	best := -1
	for i, id := range ids {
		if best < 0 || m.scorer.worse(&m.units[id].score, &m.units[ids[best]].score, m.tick) {
			best = i
		}
	}
	return best
}
