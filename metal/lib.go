package metal

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Lib is a loaded libmlxc. Its calls are serialised by one mutex, so that the error
// message mlx-c hands its error handler is the message of the call that failed.
type Lib struct {
	api
	Path    string // the file that was loaded
	Version string // MLX's version, from mlx_version
	ABI     string // "0.5" or "0.6": which form of mlx_quantize/mlx_dequantize it has

	mu   sync.Mutex
	noop uintptr // a C-callable no-op, the destructor of arrays over memory Go owns

	evals atomic.Int64 // mlx_eval calls, for tests

	plans map[*Backend]MemoryLimits // each live backend's share of the allocator limits; mu held
}

// dynlib is how a library is opened and its symbols bound: purego on darwin/arm64,
// and in the ABI test on linux; nothing else of this package depends on purego.
type dynlib struct {
	open     func(path string) (uintptr, error)
	sym      func(lib uintptr, name string) (uintptr, error)
	register func(fptr any, addr uintptr)
	callback func(fn any) uintptr
}

// errorSink receives mlx-c's error messages. mlx_set_error_handler is process-wide,
// so the sink is too; its default handler would print the message and exit.
var errorSink struct {
	sync.Mutex
	msg string
}

func handleError(msg *byte, _ unsafe.Pointer) {
	errorSink.Lock()
	errorSink.msg = goString(msg)
	errorSink.Unlock()
}

func takeError() string {
	errorSink.Lock()
	defer errorSink.Unlock()
	m := errorSink.msg
	errorSink.msg = ""
	return m
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// Error is a failed mlx-c call: the operation and MLX's own message.
type Error struct {
	Op  string // the mlx-c function, e.g. "mlx_quantized_matmul"
	Msg string // MLX's message, "" when it gave none
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("metal: %s failed (MLX gave no message)", e.Op)
	}
	return fmt.Sprintf("metal: %s: %s", e.Op, e.Msg)
}

// status turns an mlx-c status return into an error: 0 is success; anything else
// fails with the message its error handler received.
func status(op string, rc int32) error {
	if rc == 0 {
		return nil
	}
	return &Error{Op: op, Msg: takeError()}
}

// handle checks a handle returned by value: mlx-c returns a null one on failure.
func handle[H ~uintptr](op string, h H) (H, error) {
	if h == 0 {
		return 0, &Error{Op: op, Msg: takeError()}
	}
	return h, nil
}

// MinVersion is the oldest mlx-c whose API this package binds.
const MinVersion = "0.5"

// load opens path and binds every symbol of the table. A missing symbol fails the
// load with its name, since calling through an unbound function would crash.
func load(d dynlib, path string) (*Lib, error) {
	h, err := d.open(path)
	if err != nil {
		return nil, err
	}
	l := &Lib{Path: path, ABI: "0.5"}
	// mlx_hanning first appeared in mlx-c 0.6, together with the global_scale
	// argument of mlx_quantize and mlx_dequantize.
	if _, err := d.sym(h, "mlx_hanning"); err == nil {
		l.ABI = "0.6"
	}
	var missing []string
	for _, b := range l.bindings() {
		if (b.abi == abi05 && l.ABI != "0.5") || (b.abi == abi06 && l.ABI != "0.6") {
			continue
		}
		addr, err := d.sym(h, b.symbol())
		if (err != nil || addr == 0) && b.abi == abiOptional {
			continue
		}
		if err != nil || addr == 0 {
			missing = append(missing, b.symbol())
			continue
		}
		d.register(b.fn, addr)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lacks %s: it is not mlx-c %s or newer (upgrade with `brew upgrade mlx-c`)",
			path, strings.Join(missing, ", "), MinVersion)
	}
	l.setErrorHandler(d.callback(handleError), nil, 0)
	l.noop = d.callback(func(unsafe.Pointer) {})
	v, err := l.stringResult("mlx_version", l.version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	l.Version = v
	return l, nil
}

// unbound lists the api fields that bindings does not set: each would be a nil
// function. It is empty by construction; the test keeps it so.
func (a *api) unbound() []string {
	bound := map[uintptr]bool{}
	for _, b := range a.bindings() {
		bound[reflect.ValueOf(b.fn).Pointer()] = true
	}
	var out []string
	v := reflect.ValueOf(a).Elem()
	for i := 0; i < v.NumField(); i++ {
		if !bound[v.Field(i).Addr().Pointer()] {
			out = append(out, v.Type().Field(i).Name)
		}
	}
	return out
}

// stringResult calls an mlx-c function that fills an mlx_string.
func (l *Lib) stringResult(op string, fn func(*mlxString) int32) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stringNew()
	// The call may replace the handle (mlx-c allocates the string into a null one):
	// free the one it leaves, not the one it was given.
	defer func() { l.stringFree(s) }()
	if err := status(op, fn(&s)); err != nil {
		return "", err
	}
	return goString(l.stringData(s)), nil
}

// GPUAvailable asks MLX whether it has a Metal device.
func (l *Lib) GPUAvailable() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.available("mlx_metal_is_available", l.metalIsAvailable)
}

// available calls an mlx_*_is_available function (nil: the library lacks it).
func (l *Lib) available(op string, fn func(*bool) int32) (bool, error) {
	if fn == nil {
		return false, nil
	}
	var ok bool
	err := status(op, fn(&ok))
	return ok, err
}

// infoKeys are the device-info keys read, across MLX's backends: Metal reports
// memory_size and max_recommended_working_set_size, CUDA total_memory, the CPU
// device_name and architecture.
var infoKeys = []string{"device_name", "architecture", "memory_size", "total_memory", "max_recommended_working_set_size", "max_buffer_length"}

// DeviceInfo returns the GPU's properties as MLX reports them, as strings.
func (l *Lib) DeviceInfo() (map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deviceInfo(deviceGPU)
}

// deviceInfo returns the properties of MLX's first device of type t; l.mu is held.
func (l *Lib) deviceInfo(t mlxDeviceType) (map[string]string, error) {
	dev, err := handle("mlx_device_new_type", l.deviceNewType(t, 0))
	if err != nil {
		return nil, err
	}
	defer l.deviceFree(dev)
	info := l.deviceInfoNew()
	// mlx_device_info_get may replace the handle: free the one it leaves.
	defer func() { l.deviceInfoFree(info) }()
	if err := status("mlx_device_info_get", l.deviceInfoGet(&info, dev)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, key := range infoKeys {
		var has, isStr bool
		if status("mlx_device_info_has_key", l.deviceInfoHasKey(&has, info, key)) != nil || !has {
			continue
		}
		if err := status("mlx_device_info_is_string", l.deviceInfoIsStr(&isStr, info, key)); err != nil {
			return nil, err
		}
		if isStr {
			var p *byte
			if err := status("mlx_device_info_get_string", l.deviceInfoGetStr(&p, info, key)); err != nil {
				return nil, err
			}
			out[key] = goString(p)
			continue
		}
		var n uintptr
		if err := status("mlx_device_info_get_size", l.deviceInfoGetSize(&n, info, key)); err != nil {
			return nil, err
		}
		out[key] = fmt.Sprint(uint64(n))
	}
	return out, nil
}

// MemoryLimits are the MLX allocator limits the memory policy sets, in bytes; a zero
// field is left as it is.
type MemoryLimits struct {
	Wired  uint64 // memory kept resident (mlx_set_wired_limit)
	Cache  uint64 // freed buffers kept for reuse (mlx_set_cache_limit)
	Memory uint64 // the allocator's soft limit (mlx_set_memory_limit)
}

// SetLimits applies lim and returns the previous limits.
func (l *Lib) SetLimits(lim MemoryLimits) (MemoryLimits, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.setLimits(lim)
}

// setLimits is SetLimits with l.mu held.
func (l *Lib) setLimits(lim MemoryLimits) (MemoryLimits, error) {
	var prev MemoryLimits
	set := []struct {
		op   string
		fn   func(*uintptr, uintptr) int32
		v    uint64
		prev *uint64
	}{
		{"mlx_set_wired_limit", l.setWiredLimit, lim.Wired, &prev.Wired},
		{"mlx_set_cache_limit", l.setCacheLimit, lim.Cache, &prev.Cache},
		{"mlx_set_memory_limit", l.setMemoryLimit, lim.Memory, &prev.Memory},
	}
	for _, s := range set {
		if s.v == 0 {
			continue
		}
		var old uintptr
		if err := status(s.op, s.fn(&old, uintptr(s.v))); err != nil {
			return prev, err
		}
		*s.prev = uint64(old)
	}
	return prev, nil
}

// MemoryUse is what MLX's allocator holds, in bytes.
type MemoryUse struct {
	Active, Peak, Cache uint64
}

// Memory reads the allocator's counters.
func (l *Lib) Memory() (MemoryUse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var a, p, c uintptr
	err := errors.Join(
		status("mlx_get_active_memory", l.getActiveMemory(&a)),
		status("mlx_get_peak_memory", l.getPeakMemory(&p)),
		status("mlx_get_cache_memory", l.getCacheMemory(&c)))
	return MemoryUse{Active: uint64(a), Peak: uint64(p), Cache: uint64(c)}, err
}

// ResetPeak starts the allocator's peak (MemoryUse.Peak) over from what it holds now.
// The counters are the process's: every backend on the library shares them.
func (l *Lib) ResetPeak() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return status("mlx_reset_peak_memory", l.resetPeakMemory())
}
