package metal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// fakeLib is a dynlib over Go functions: each symbol gets an address, and register
// points the api field at a Go implementation (or one returning zero values).
type fakeLib struct {
	syms     map[string]uintptr
	impls    map[string]any
	handler  func(*byte, unsafe.Pointer) // what load registered as mlx-c's error handler
	openErr  error
	versions []byte
}

func newFakeLib(v06 bool, omit ...string) *fakeLib {
	f := &fakeLib{syms: map[string]uintptr{}, impls: map[string]any{}}
	var a api
	for i, b := range a.bindings() {
		if (b.abi == abi06) == v06 || b.abi == abiAll {
			f.syms[b.symbol()] = uintptr(i + 1)
		}
	}
	if v06 {
		f.syms["mlx_hanning"] = 999
	}
	for _, s := range omit {
		delete(f.syms, s)
	}
	f.versions = append([]byte("0.30.6"), 0)
	f.impls["mlx_string_data"] = func(mlxString) *byte { return &f.versions[0] }
	return f
}

func (f *fakeLib) dynlib() dynlib {
	byAddr := map[uintptr]string{}
	for n, a := range f.syms {
		byAddr[a] = n
	}
	return dynlib{
		open: func(string) (uintptr, error) { return 1, f.openErr },
		sym: func(_ uintptr, name string) (uintptr, error) {
			if a, ok := f.syms[name]; ok {
				return a, nil
			}
			return 0, errors.New("symbol not found")
		},
		register: func(fptr any, addr uintptr) {
			v := reflect.ValueOf(fptr).Elem()
			if impl, ok := f.impls[byAddr[addr]]; ok {
				v.Set(reflect.ValueOf(impl))
				return
			}
			v.Set(reflect.MakeFunc(v.Type(), func([]reflect.Value) []reflect.Value {
				out := make([]reflect.Value, v.Type().NumOut())
				for i := range out {
					out[i] = reflect.Zero(v.Type().Out(i))
				}
				return out
			}))
		},
		callback: func(fn any) uintptr {
			if h, ok := fn.(func(*byte, unsafe.Pointer)); ok {
				f.handler = h
			}
			return 42
		},
	}
}

func TestLoadBindsAndDetectsABI(t *testing.T) {
	for _, v06 := range []bool{false, true} {
		f := newFakeLib(v06)
		var handlerArg uintptr
		f.impls["mlx_set_error_handler"] = func(h uintptr, _ unsafe.Pointer, _ uintptr) { handlerArg = h }
		l, err := load(f.dynlib(), "/fake/libmlxc.dylib")
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: "0.5", true: "0.6"}[v06]
		if l.ABI != want || l.Version != "0.30.6" || l.Path != "/fake/libmlxc.dylib" {
			t.Fatalf("loaded %+v, want ABI %s version 0.30.6", l, want)
		}
		if handlerArg != 42 || f.handler == nil {
			t.Fatal("load did not install the error handler before its first call")
		}
		if (l.quantize06 != nil) != v06 || (l.quantize05 != nil) == v06 {
			t.Fatalf("ABI %s bound the wrong mlx_quantize", l.ABI)
		}
	}
}

func TestLoadNamesMissingSymbols(t *testing.T) {
	f := newFakeLib(false, "mlx_fast_rope", "mlx_quantized_matmul")
	_, err := load(f.dynlib(), "/old/libmlxc.dylib")
	if err == nil {
		t.Fatal("a library without mlx_fast_rope loaded")
	}
	for _, want := range []string{"/old/libmlxc.dylib", "mlx_fast_rope", "mlx_quantized_matmul", "0.5 or newer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// The handler load installs is what turns a failing call's status into MLX's message.
func TestErrorHandlerMessageBecomesTheError(t *testing.T) {
	f := newFakeLib(false)
	if _, err := load(f.dynlib(), "/fake/libmlxc.dylib"); err != nil {
		t.Fatal(err)
	}
	h := f.handler
	if h == nil {
		t.Fatal("load registered no error handler")
	}
	msg := append([]byte("[matmul] Last dimension of first input with shape (2,3) must match second to last dimension of second input with shape (4,5)."), 0)
	h(&msg[0], nil)
	err := status("mlx_matmul", 1)
	var e *Error
	if !errors.As(err, &e) || e.Op != "mlx_matmul" || !strings.Contains(e.Msg, "shape (2,3)") {
		t.Fatalf("status gave %v", err)
	}
	if err := status("mlx_matmul", 0); err != nil {
		t.Fatalf("status 0 gave %v", err)
	}
	// The message is consumed: a later failure without one does not repeat it.
	if err := status("mlx_add", 1); err == nil || strings.Contains(err.Error(), "matmul]") || !strings.Contains(err.Error(), "no message") {
		t.Fatalf("second failure gave %v", err)
	}
	h(&msg[0], nil)
	if _, err := handle("mlx_array_new_data", mlxArray(0)); err == nil || !strings.Contains(err.Error(), "mlx_array_new_data: [matmul]") {
		t.Fatalf("a null handle gave %v", err)
	}
	if got, err := handle("mlx_array_new_data", mlxArray(7)); err != nil || got != 7 {
		t.Fatalf("a good handle gave %v, %v", got, err)
	}
}

func TestCandidates(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	got := candidates("darwin", env(nil), "/Applications/mlxg/bin/mlxg")
	want := []string{"/Applications/mlxg/bin/libmlxc.dylib", "/opt/homebrew/lib/libmlxc.dylib", "/usr/local/lib/libmlxc.dylib"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("default order %v, want %v", got, want)
	}
	if got := candidates("darwin", env(map[string]string{EnvPath: "/x/lib/libmlxc.0.5.dylib"}), "/bin/mlxg"); !reflect.DeepEqual(got, []string{"/x/lib/libmlxc.0.5.dylib"}) {
		t.Errorf("%s naming a file: %v", EnvPath, got)
	}
	if got := candidates("darwin", env(map[string]string{EnvPath: "/x/lib"}), "/bin/mlxg"); !reflect.DeepEqual(got, []string{"/x/lib/libmlxc.dylib"}) {
		t.Errorf("%s naming a directory: %v", EnvPath, got)
	}
	if got := candidates("darwin", env(nil), ""); len(got) != 2 {
		t.Errorf("without an executable path: %v", got)
	}
	got = candidates("linux", env(nil), "/opt/mlxg/mlxg")
	want = []string{"/opt/mlxg/libmlxc.so", "/usr/local/lib/libmlxc.so", "/usr/lib/libmlxc.so"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Linux order %v, want %v", got, want)
	}
	if got := candidates("linux", env(map[string]string{EnvPath: "/x/lib"}), "/bin/mlxg"); !reflect.DeepEqual(got, []string{"/x/lib/libmlxc.so"}) {
		t.Errorf("%s naming a directory on Linux: %v", EnvPath, got)
	}
}

func TestOpenFirstRecordsEveryAttempt(t *testing.T) {
	dir := t.TempDir()
	broken, good := filepath.Join(dir, "broken", LibName), filepath.Join(dir, "good", LibName)
	for _, p := range []string{broken, good} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not really a library"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "none", LibName)

	f := newFakeLib(false)
	d := f.dynlib()
	open := d.open
	d.open = func(p string) (uintptr, error) {
		if p == broken {
			return 0, errors.New("dlopen: not a mach-o file")
		}
		return open(p)
	}
	l, err := openFirst(d, []string{missing, broken, good})
	if err != nil || l.Path != good {
		t.Fatalf("openFirst = %v, %v; want the library at %s", l, err, good)
	}

	_, err = openFirst(d, []string{missing, broken})
	var ue *UnavailableError
	if !errors.As(err, &ue) || len(ue.Tried) != 2 {
		t.Fatalf("openFirst over no usable library gave %v", err)
	}
	howTo := "brew install mlx-c"
	if runtime.GOOS != "darwin" {
		howTo = "MLX on Linux"
	}
	for _, want := range []string{missing + ": not found", broken + ": dlopen: not a mach-o file", "could not be loaded", howTo, EnvPath} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	_, err = openFirst(d, []string{missing})
	if err == nil || !strings.Contains(err.Error(), "libmlxc not found") {
		t.Errorf("nothing installed gave %v", err)
	}
	// A library that failed to load is the reason even when a later place is empty.
	_, err = openFirst(d, []string{broken, missing})
	if err == nil || !strings.Contains(err.Error(), "libmlxc could not be loaded") {
		t.Errorf("a broken library then nothing gave %v", err)
	}
}

func TestOpenOnThisPlatform(t *testing.T) {
	switch {
	case runtime.GOOS == "darwin" && runtime.GOARCH == "arm64":
		t.Skip("on Apple Silicon Open really loads libmlxc; this test covers the other platforms")
	case runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64"):
		// Linux loads libmlxc too: with nothing where MLXG_MLXC_PATH points, open says
		// where it looked and where the install docs are. (Open would keep the answer for
		// the process: other tests load the real library.)
		t.Setenv(EnvPath, filepath.Join(t.TempDir(), "none"))
		l, err := open()
		var ue *UnavailableError
		if l != nil || !errors.As(err, &ue) || errors.Is(err, ErrUnsupportedPlatform) || !strings.Contains(err.Error(), "MLX on Linux") {
			t.Fatalf("Open() = %v, %v; want an UnavailableError saying how to install libmlxc", l, err)
		}
		return
	}
	l, err := Open()
	if l != nil || !errors.Is(err, ErrUnsupportedPlatform) {
		t.Fatalf("Open() = %v, %v; want ErrUnsupportedPlatform", l, err)
	}
	want := "Metal backend unavailable: " + ErrUnsupportedPlatform.Error() + " (this is " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func TestDeviceInfoAndMemory(t *testing.T) {
	f := newFakeLib(false)
	name := append([]byte("Apple M3 Max"), 0)
	f.impls["mlx_device_info_has_key"] = func(res *bool, _ mlxDeviceInfo, key string) int32 {
		*res = key == "device_name" || key == "memory_size"
		return 0
	}
	f.impls["mlx_device_info_is_string"] = func(res *bool, _ mlxDeviceInfo, key string) int32 {
		*res = key == "device_name"
		return 0
	}
	f.impls["mlx_device_info_get_string"] = func(res **byte, _ mlxDeviceInfo, _ string) int32 { *res = &name[0]; return 0 }
	f.impls["mlx_device_info_get_size"] = func(res *uintptr, _ mlxDeviceInfo, _ string) int32 { *res = 128 << 30; return 0 }
	f.impls["mlx_device_new_type"] = func(mlxDeviceType, int32) mlxDevice { return 5 }
	f.impls["mlx_get_active_memory"] = func(res *uintptr) int32 { *res = 1; return 0 }
	f.impls["mlx_get_peak_memory"] = func(res *uintptr) int32 { *res = 2; return 0 }
	f.impls["mlx_get_cache_memory"] = func(res *uintptr) int32 { *res = 3; return 0 }
	resets := 0
	f.impls["mlx_reset_peak_memory"] = func() int32 { resets++; return 0 }
	l, err := load(f.dynlib(), "/fake/libmlxc.dylib")
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.DeviceInfo()
	if err != nil || !reflect.DeepEqual(info, map[string]string{"device_name": "Apple M3 Max", "memory_size": "137438953472"}) {
		t.Errorf("DeviceInfo = %v, %v", info, err)
	}
	if m, err := l.Memory(); err != nil || m != (MemoryUse{Active: 1, Peak: 2, Cache: 3}) {
		t.Errorf("Memory = %+v, %v", m, err)
	}
	if err := l.ResetPeak(); err != nil || resets != 1 {
		t.Errorf("ResetPeak: %v, %d calls", err, resets)
	}
	f.impls["mlx_device_new_type"] = func(mlxDeviceType, int32) mlxDevice { return 0 }
	l, _ = load(f.dynlib(), "/fake/libmlxc.dylib")
	if _, err := l.DeviceInfo(); err == nil || !strings.Contains(err.Error(), "mlx_device_new_type") {
		t.Errorf("a null device gave %v", err)
	}
}

// mlx-c allocates a string or a device-info map into the handle it is given: what is
// freed must be the handle the call left, not the one made before it.
func TestOutParameterHandlesAreFreed(t *testing.T) {
	f := newFakeLib(true)
	var freedStrings []mlxString
	var freedInfos []mlxDeviceInfo
	f.impls["mlx_string_new"] = func() mlxString { return 1 }
	f.impls["mlx_version"] = func(res *mlxString) int32 { *res = 2; return 0 }
	f.impls["mlx_string_free"] = func(s mlxString) int32 { freedStrings = append(freedStrings, s); return 0 }
	f.impls["mlx_device_new_type"] = func(mlxDeviceType, int32) mlxDevice { return 5 }
	f.impls["mlx_device_info_new"] = func() mlxDeviceInfo { return 7 }
	f.impls["mlx_device_info_get"] = func(res *mlxDeviceInfo, _ mlxDevice) int32 { *res = 8; return 0 }
	f.impls["mlx_device_info_free"] = func(i mlxDeviceInfo) int32 { freedInfos = append(freedInfos, i); return 0 }
	l, err := load(f.dynlib(), "/fake/libmlxc.dylib")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeviceInfo(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(freedStrings, []mlxString{2}) || !reflect.DeepEqual(freedInfos, []mlxDeviceInfo{8}) {
		t.Errorf("freed strings %v and device infos %v; want the handles the calls returned, [2] and [8]", freedStrings, freedInfos)
	}
}
