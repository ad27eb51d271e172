package residency

import (
	"bufio"
	"fmt"
	"os"
)

// EventsEnv names a file to which each manager made afterwards writes its events, one
// line each, to see where a streamed run's bytes go (what was read on demand and on a
// guess, what was evicted and read again): "A id hit|miss" an Acquire, "R id demand|guess"
// a read started, "N id" a read into a newly allocated buffer (not an evicted
// unit's), "E id" an eviction. Unit ids are in the order the backend added them (a
// mixture-of-experts model: layer by layer, expert by expert). For measurement only.
const EventsEnv = "MLXG_STREAM_EVENTS"

// events is a manager's event log; nil writes nothing.
type events struct {
	f *os.File
	w *bufio.Writer
}

func openEvents() *events {
	p := os.Getenv(EventsEnv)
	if p == "" {
		return nil
	}
	f, err := os.Create(p)
	if err != nil {
		return nil
	}
	return &events{f: f, w: bufio.NewWriterSize(f, 1<<16)}
}

func (e *events) log(kind byte, id int, what string) {
	if e == nil {
		return
	}
	if what == "" {
		fmt.Fprintf(e.w, "%c %d\n", kind, id)
		return
	}
	fmt.Fprintf(e.w, "%c %d %s\n", kind, id, what)
}

func (e *events) close() {
	if e == nil {
		return
	}
	e.w.Flush()
	e.f.Close()
}
