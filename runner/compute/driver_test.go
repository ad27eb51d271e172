package compute

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

type nullBackend struct{ Backend }

func (nullBackend) Name() string { return "null" }

func TestRegisterAndOpen(t *testing.T) {
	var got OpenOptions
	Register("test-null", DriverFunc(func(o OpenOptions) (Backend, error) {
		got = o
		return nullBackend{}, nil
	}))
	defer func() {
		driversMu.Lock()
		delete(drivers, "test-null")
		driversMu.Unlock()
	}()
	if !slices.Contains(Drivers(), "test-null") {
		t.Errorf("Drivers() = %v, want test-null among them", Drivers())
	}
	b, err := Open("test-null", OpenOptions{Threads: 3})
	if err != nil || b.Name() != "null" || got.Threads != 3 {
		t.Errorf("Open: %v %v, options %+v", b, err, got)
	}

	_, err = Open("test-missing", OpenOptions{})
	var nr *NotRegisteredError
	if !errors.As(err, &nr) || nr.Name != "test-missing" || !strings.Contains(err.Error(), "not built into this program") {
		t.Errorf("Open of an unregistered backend: %v", err)
	}

	for _, bad := range []func(){
		func() { Register("test-null", DriverFunc(func(OpenOptions) (Backend, error) { return nil, nil })) },
		func() { Register("test-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Register did not panic")
				}
			}()
			bad()
		}()
	}
}
