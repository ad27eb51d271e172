package compute

import (
	"fmt"
	"sort"
	"sync"

	"github.com/mlxg/mlxg/kvstore"
)

// Backends register themselves by name, as database/sql drivers do: a backend package
// calls Register in its init, and the program's main package imports the backends it
// wants built in. Code that picks or checks a backend (runner/backend) then opens it by
// name and never imports the package that implements it, so a backend with native
// dependencies (metal, bound to libmlxc) is linked only into binaries that ask for it,
// and the interface's packages stay below every implementation.

// Driver opens backends of one kind.
type Driver interface {
	// Open starts a backend, or says why it cannot run on this machine.
	Open(o OpenOptions) (Backend, error)
}

// OpenOptions are what a driver may need to start a backend.
type OpenOptions struct {
	// Threads is how many goroutines a backend computing on the CPU itself uses; <= 0
	// means one per core. A backend that hands the work to another library ignores it.
	Threads int
}

// DriverFunc lets a function be a Driver.
type DriverFunc func(o OpenOptions) (Backend, error)

// Open calls f.
func (f DriverFunc) Open(o OpenOptions) (Backend, error) { return f(o) }

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a backend available under name. It panics when d is nil or name is
// taken: both are programming errors, found at start-up.
func Register(name string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if d == nil {
		panic("compute: Register of a nil driver for " + name)
	}
	if _, dup := drivers[name]; dup {
		panic("compute: backend registered twice: " + name)
	}
	drivers[name] = d
}

// Lookup returns the driver registered under name.
func Lookup(name string) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// Drivers lists the registered backends' names, sorted.
func Drivers() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NotRegisteredError is Open's error for a name no package registered: the binary was
// built without that backend.
type NotRegisteredError struct{ Name string }

func (e *NotRegisteredError) Error() string {
	return fmt.Sprintf("the %s backend is not built into this program (registered: %v)", e.Name, Drivers())
}

// Open starts a backend of the driver registered under name.
func Open(name string, o OpenOptions) (Backend, error) {
	d, ok := Lookup(name)
	if !ok {
		return nil, &NotRegisteredError{Name: name}
	}
	return d.Open(o)
}

// MemoryPlanner is a backend that manages its own memory from the KV policy's plan for
// a model being loaded (MLX: the allocator's wired and cache limits). A backend whose
// memory is plain Go heap (CPU) does not implement it.
type MemoryPlanner interface {
	ApplyMemoryPlan(kvstore.Plan) error
}
