package registry

import (
	"errors"
	"sync/atomic"
)

// ErrUnsupported is wrapped by the errors of checkpoints whose architecture (config.json's model_type) no
// architecture linked into this program runs. The server answers it with a 400: the request names a model
// mlxg cannot run, which no retry fixes.
var ErrUnsupported = errors.New("architecture not supported")

// archCheck is the installed ArchitectureCheck; nil until one is installed.
var archCheck atomic.Pointer[func(config []byte) error]

// SetArchitectureCheck installs what pull and create ask, once config.json is read and before any weight is
// downloaded or converted, whether the checkpoint's architecture is one this program runs. The architectures
// are registered in runner/model, which imports registry, so the check is handed down from above: api/server
// installs runner/model's CheckConfig, and a program that links no engine installs none (every checkpoint
// then passes). check returns nil for a supported config.json, else an error naming its model_type.
func SetArchitectureCheck(check func(config []byte) error) {
	if check == nil {
		archCheck.Store(nil)
		return
	}
	archCheck.Store(&check)
}

// CheckArchitecture asks the installed check about the bytes of a config.json. Its error wraps
// ErrUnsupported (whatever the check's own error wraps), so that callers can tell a checkpoint mlxg cannot
// run from a failure to read it.
func CheckArchitecture(config []byte) error {
	check := archCheck.Load()
	if check == nil {
		return nil
	}
	err := (*check)(config)
	if err == nil || errors.Is(err, ErrUnsupported) {
		return err
	}
	return unsupportedError{err}
}

// unsupportedError marks a check's error as ErrUnsupported, keeping its message.
type unsupportedError struct{ err error }

func (e unsupportedError) Error() string   { return e.err.Error() }
func (e unsupportedError) Unwrap() []error { return []error{ErrUnsupported, e.err} }
