//go:build race

package runner

// raceEnabled: the race detector is on (sync.Pool drops items, allocations differ).
const raceEnabled = true
