//go:build linux && (amd64 || arm64)

package metal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// This test compiles a stand-in libmlxc from the signature table's own C prototypes:
// every function logs the arguments it received, as C sees them, and fills its
// out-parameters. Loading it with the real loader (purego, as on darwin) and calling
// every binding checks, on this machine's C ABI, that each Go argument arrives as the
// C parameter it stands for: handles passed as one-pointer structs, the packed
// optionals, floats among integers, arguments spilled to the stack, out-parameters,
// returns, and mlx-c's error handler calling back into Go.

// cArg is how the stand-in logs one parameter of C type typ named n.
func cArg(typ, n string) (format, expr string) {
	switch typ {
	case "mlx_array", "mlx_stream", "mlx_vector_array", "mlx_vector_string", "mlx_string", "mlx_device",
		"mlx_device_info", "mlx_fast_metal_kernel", "mlx_fast_metal_kernel_config", "mlx_distributed_group":
		return "%lx", "(unsigned long)" + n + ".ctx"
	case "mlx_array*", "mlx_vector_array*", "mlx_string*", "mlx_device_info*", "mlx_distributed_group*":
		return "out", "(" + n + "->ctx = (void*)0xabc, 0)"
	case "size_t*":
		return "out", "(*" + n + " = 4242, 0)"
	case "bool*":
		return "out", "(*" + n + " = 1, 0)"
	case "char**":
		return "out", "(*" + n + " = \"out\", 0)"
	case "mlx_optional_int":
		return "%d/%d", n + ".value, (int)" + n + ".has_value"
	case "mlx_optional_float":
		return "%.9g/%d", "(double)" + n + ".value, (int)" + n + ".has_value"
	case "mlx_optional_dtype":
		return "%d/%d", "(int)" + n + ".value, (int)" + n + ".has_value"
	case "int", "mlx_dtype", "mlx_device_type", "bool":
		return "%d", "(int)" + n
	case "float":
		return "%.9g", "(double)" + n
	case "double":
		return "%.17g", n
	case "size_t":
		return "%zu", n
	case "char*":
		return "%s", n
	case "int*":
		return "%d", n + "[0]"
	case "void*":
		return "%lx", "(unsigned long)" + n
	case "fnptr", "mlx_error_handler_func":
		return "fn", "0"
	}
	panic("no C logging for type " + typ)
}

// cReturn is the stand-in's return statement for C type typ.
func cReturn(typ, name string) string {
	switch typ {
	case "void":
		return ""
	case "int":
		return fmt.Sprintf("if (next_status) { handler(\"boom from %s\", handler_data); } return next_status;", name)
	case "size_t":
		return "return 77;"
	case "mlx_dtype":
		return "return 10;"
	case "int*":
		return "static int v[2] = {3, 4}; return v;"
	case "char*":
		return "return \"ret\";"
	case "float*":
		return "static float v[1] = {1.5f}; return v;"
	}
	return "return (" + typ + "){(void*)0x5150};"
}

const abiPrelude = `#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
typedef struct { void* ctx; } mlx_array;
typedef struct { void* ctx; } mlx_stream;
typedef struct { void* ctx; } mlx_vector_array;
typedef struct { void* ctx; } mlx_vector_string;
typedef struct { void* ctx; } mlx_string;
typedef struct { void* ctx; } mlx_device;
typedef struct { void* ctx; } mlx_device_info;
typedef struct { void* ctx; } mlx_fast_metal_kernel;
typedef struct { void* ctx; } mlx_fast_metal_kernel_config;
typedef enum { MLX_BOOL } mlx_dtype;
typedef enum { MLX_CPU, MLX_GPU } mlx_device_type;
typedef struct { int value; bool has_value; } mlx_optional_int;
typedef struct { float value; bool has_value; } mlx_optional_float;
typedef struct { mlx_dtype value; bool has_value; } mlx_optional_dtype;
typedef void (*mlx_error_handler_func)(const char* msg, void* data);
static void no_handler(const char* msg, void* data) {}
static mlx_error_handler_func handler = no_handler;
static void* handler_data;
static char logbuf[4096];
static int next_status;
const char* abi_log(void) { return logbuf; }
void abi_set_status(int s) { next_status = s; }
`

// standIn writes the C source of a library with the bindings of one ABI.
func standIn(t *testing.T, version abi) string {
	var b strings.Builder
	b.WriteString(abiPrelude)
	var a api
	for _, bd := range a.bindings() {
		if bd.abi != abiAll && bd.abi != version {
			continue
		}
		ret, name, params, err := parseProto(bd.proto)
		if err != nil {
			t.Fatal(err)
		}
		// Name the parameters p0, p1, ... so that function-pointer ones need no parsing.
		var decl, formats, exprs []string
		for i, p := range params {
			n := fmt.Sprintf("p%d", i)
			ctype := strings.ReplaceAll(p.typ, "*", " *")
			if p.typ == "fnptr" {
				ctype = "void (*" + n + ")(void*)"
			} else {
				ctype += " " + n
			}
			if strings.HasPrefix(p.typ, "char") || p.typ == "int*" {
				ctype = "const " + ctype
			}
			decl = append(decl, ctype)
			f, e := cArg(p.typ, n)
			formats = append(formats, f)
			if f != "out" && f != "fn" {
				exprs = append(exprs, e)
			}
		}
		if len(decl) == 0 {
			decl = []string{"void"}
		}
		rtype := strings.ReplaceAll(ret.typ, "*", " *")
		if ret.typ == "char*" || ret.typ == "int*" || ret.typ == "float*" {
			rtype = "const " + rtype
		}
		fmt.Fprintf(&b, "%s %s(%s) {\n", rtype, name, strings.Join(decl, ", "))
		for i, p := range params {
			if f, e := cArg(p.typ, fmt.Sprintf("p%d", i)); f == "out" {
				fmt.Fprintf(&b, "  (void)%s;\n", e)
			}
		}
		if name == "mlx_set_error_handler" {
			b.WriteString("  handler = p0; handler_data = p1;\n")
		}
		args := ""
		if len(exprs) > 0 {
			args = ", " + strings.Join(exprs, ", ")
		}
		fmt.Fprintf(&b, "  snprintf(logbuf, sizeof logbuf, \"%s\"%s);\n", strings.TrimSpace(name+" "+strings.Join(formats, " ")), args)
		fmt.Fprintf(&b, "  %s\n}\n", cReturn(ret.typ, name))
	}
	if version == abi06 {
		b.WriteString("int mlx_hanning(mlx_array* res, int m, mlx_stream s) { return 0; }\n")
	}
	return b.String()
}

var puregoLib = dynlib{
	open:     func(path string) (uintptr, error) { return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL) },
	sym:      purego.Dlsym,
	register: func(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) },
	callback: purego.NewCallback,
}

// goArg makes the k-th argument of Go type ty for C type ctyp and says what the
// stand-in must log for it; check verifies an out-parameter after the call.
func goArgFor(ty reflect.Type, ctyp string, k int) (v reflect.Value, logged string, check func() error) {
	switch ctyp {
	case "mlx_array*", "mlx_vector_array*", "mlx_string*", "mlx_device_info*", "size_t*", "bool*", "char**":
		p := reflect.New(ty.Elem())
		want := map[string]string{"size_t*": "4242", "bool*": "true", "char**": "out"}[ctyp]
		if want == "" {
			want = "2748" // 0xabc
		}
		return p, "out", func() error {
			got := fmt.Sprint(p.Elem().Interface())
			if ctyp == "char**" {
				got = goString(*p.Interface().(**byte))
			}
			if got != want {
				return fmt.Errorf("out-parameter %s is %s, want %s", ctyp, got, want)
			}
			return nil
		}
	case "fnptr", "mlx_error_handler_func":
		return reflect.Zero(ty), "fn", nil
	}
	switch ty {
	case typeOf[optInt]():
		return reflect.ValueOf(someInt(-3 - k)), fmt.Sprintf("%d/1", -3-k), nil
	case typeOf[optFloat]():
		f := float32(0.5 + float64(k))
		return reflect.ValueOf(someFloat(f)), fmt.Sprintf("%.9g/1", float64(f)), nil
	case typeOf[optDtype]():
		return reflect.ValueOf(someDtype(dtBfloat16)), "12/1", nil
	case typeOf[string]():
		s := fmt.Sprintf("s%d", k)
		return reflect.ValueOf(s), s, nil
	case typeOf[*int32]():
		x := []int32{int32(5 + k), 6}
		return reflect.ValueOf(&x[0]), fmt.Sprint(5 + k), nil
	case typeOf[stackBool]():
		return reflect.ValueOf(stackBool(1)), "1", nil
	case typeOf[unsafe.Pointer]():
		x := new(int64)
		return reflect.ValueOf(unsafe.Pointer(x)), fmt.Sprintf("%x", uintptr(unsafe.Pointer(x))), nil
	}
	switch ty.Kind() {
	case reflect.Uintptr:
		if ctyp == "size_t" {
			return reflect.ValueOf(uintptr(123 + k)), fmt.Sprint(123 + k), nil
		}
		h := uintptr(0x1000 + 16*k)
		return reflect.ValueOf(h).Convert(ty), fmt.Sprintf("%x", h), nil
	case reflect.Int32:
		return reflect.ValueOf(int32(-7 - k)).Convert(ty), fmt.Sprint(-7 - k), nil
	case reflect.Bool:
		return reflect.ValueOf(true), "1", nil
	case reflect.Float32:
		f := float32(1.25 + float64(k))
		return reflect.ValueOf(f), fmt.Sprintf("%.9g", float64(f)), nil
	case reflect.Float64:
		f := 2.5 + float64(k)
		return reflect.ValueOf(f), fmt.Sprintf("%.17g", f), nil
	}
	panic("no Go argument for " + ty.String())
}

func TestEveryBindingAgainstTheCABI(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in library")
	}
	for _, version := range []abi{abi05, abi06} {
		dir := t.TempDir()
		src, so := filepath.Join(dir, "mlxc.c"), filepath.Join(dir, "libmlxc.so")
		if err := os.WriteFile(src, []byte(standIn(t, version)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-w", "-o", so, src).CombinedOutput(); err != nil {
			t.Fatalf("compiling the stand-in: %v\n%s", err, out)
		}
		l, err := load(puregoLib, so)
		if err != nil {
			t.Fatal(err)
		}
		if wantABI := map[abi]string{abi05: "0.5", abi06: "0.6"}[version]; l.ABI != wantABI || l.Version != "ret" {
			t.Fatalf("loaded ABI %s version %q, want %s and the stand-in's mlx_string_data", l.ABI, l.Version, wantABI)
		}
		h, _ := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
		var logText func() string
		var setStatus func(int32)
		purego.RegisterLibFunc(&logText, h, "abi_log")
		purego.RegisterLibFunc(&setStatus, h, "abi_set_status")

		calls, want := 0, 0
		for _, bd := range l.bindings() {
			if bd.abi == abiAll || bd.abi == version {
				want++
			}
		}
		for _, bd := range l.bindings() {
			if bd.abi != abiAll && bd.abi != version || bd.symbol() == "mlx_set_error_handler" {
				continue
			}
			ret, name, params, _ := parseProto(bd.proto)
			fn := reflect.ValueOf(bd.fn).Elem()
			var args []reflect.Value
			var logged []string
			var checks []func() error
			for i, p := range params {
				v, s, check := goArgFor(fn.Type().In(i), p.typ, i)
				args, logged = append(args, v), append(logged, s)
				if check != nil {
					checks = append(checks, check)
				}
			}
			out := fn.Call(args)
			calls++
			if got, want := logText(), strings.TrimSpace(name+" "+strings.Join(logged, " ")); got != want {
				t.Errorf("C received %q, want %q", got, want)
			}
			for _, c := range checks {
				if err := c(); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			if len(out) == 1 {
				got := out[0].Interface()
				want := map[string]string{"int": "0", "size_t": "77", "mlx_dtype": "10"}[ret.typ]
				switch ret.typ {
				case "int*":
					got = *out[0].Interface().(*int32)
					want = "3"
				case "char*":
					got = goString(out[0].Interface().(*byte))
					want = "ret"
				case "float*":
					got = *(*float32)(out[0].Interface().(unsafe.Pointer))
					want = "1.5"
				case "int", "size_t", "mlx_dtype":
				default:
					want = "20816" // 0x5150, a handle returned by value
				}
				if fmt.Sprint(got) != want {
					t.Errorf("%s returned %v, want %s", name, got, want)
				}
			}
		}
		if calls != want-1 { // all but mlx_set_error_handler, which load called
			t.Errorf("%d bindings called, want %d", calls, want-1)
		}

		// A failing call: mlx-c calls the handler load installed, then returns 1.
		setStatus(1)
		var r mlxArray
		err = status("mlx_add", l.add(&r, 1, 2, 3))
		setStatus(0)
		if err == nil || err.Error() != "metal: mlx_add: boom from mlx_add" {
			t.Errorf("a failing mlx_add gave %v", err)
		}
	}
}
