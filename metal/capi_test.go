package metal

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// cParam is one parameter (or the return) of a C prototype, const dropped.
type cParam struct{ typ, name string }

// parseProto splits "ret name(type a, type b)" into its return type, name and
// parameter types. A function-pointer parameter's type is "fnptr".
func parseProto(p string) (ret cParam, name string, params []cParam, err error) {
	open, close := strings.Index(p, "("), strings.LastIndex(p, ")")
	if open < 0 || close != len(p)-1 {
		return ret, "", nil, fmt.Errorf("no parameter list in %q", p)
	}
	head := strings.Fields(strings.ReplaceAll(p[:open], "*", "* "))
	name = head[len(head)-1]
	ret = cParam{typ: cType(strings.Join(head[:len(head)-1], " "))}
	body := p[open+1 : close]
	if body == "void" {
		return ret, name, nil, nil
	}
	depth, start := 0, 0
	var parts []string
	for i := 0; i <= len(body); i++ {
		switch {
		case i == len(body) || body[i] == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(body[start:i]))
			start = i + 1
		case body[i] == '(':
			depth++
		case body[i] == ')':
			depth--
		}
	}
	for _, part := range parts {
		if strings.Contains(part, "(*") {
			params = append(params, cParam{typ: "fnptr", name: part})
			continue
		}
		f := strings.Fields(strings.ReplaceAll(part, "*", "* "))
		if len(f) < 2 {
			return ret, "", nil, fmt.Errorf("%s: parameter %q has no name", name, part)
		}
		params = append(params, cParam{typ: cType(strings.Join(f[:len(f)-1], " ")), name: f[len(f)-1]})
	}
	return ret, name, params, nil
}

// cType normalises a C type: const dropped, stars attached.
func cType(s string) string {
	s = strings.ReplaceAll(" "+s+" ", " const ", " ")
	return strings.ReplaceAll(strings.TrimSpace(strings.Join(strings.Fields(s), " ")), " *", "*")
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// goArg is the Go type each C parameter type must have.
var goArg = map[string]reflect.Type{
	"mlx_array": typeOf[mlxArray](), "mlx_array*": typeOf[*mlxArray](),
	"mlx_stream":       typeOf[mlxStream](),
	"mlx_vector_array": typeOf[mlxVectorArray](), "mlx_vector_array*": typeOf[*mlxVectorArray](),
	"mlx_vector_string": typeOf[mlxVectorString](),
	"mlx_string":        typeOf[mlxString](), "mlx_string*": typeOf[*mlxString](),
	"mlx_device":      typeOf[mlxDevice](),
	"mlx_device_info": typeOf[mlxDeviceInfo](), "mlx_device_info*": typeOf[*mlxDeviceInfo](),
	"mlx_device_type":       typeOf[mlxDeviceType](),
	"mlx_distributed_group": typeOf[mlxGroup](), "mlx_distributed_group*": typeOf[*mlxGroup](),
	"mlx_fast_metal_kernel":        typeOf[mlxKernel](),
	"mlx_fast_metal_kernel_config": typeOf[mlxKernelConfig](),
	"mlx_dtype":                    typeOf[mlxDtype](),
	"mlx_optional_int":             typeOf[optInt](),
	"mlx_optional_float":           typeOf[optFloat](),
	"mlx_optional_dtype":           typeOf[optDtype](),
	"mlx_error_handler_func":       typeOf[uintptr](),
	"fnptr":                        typeOf[uintptr](),
	"int":                          typeOf[int32](), "int*": typeOf[*int32](),
	"bool": typeOf[bool](), "bool*": typeOf[*bool](),
	"float":  typeOf[float32](),
	"double": typeOf[float64](),
	"size_t": typeOf[uintptr](), "size_t*": typeOf[*uintptr](),
	"char*":  typeOf[string](), // purego copies a Go string to a NUL-terminated C string for the call
	"char**": typeOf[**byte](),
	"void*":  typeOf[unsafe.Pointer](),
}

// goRet is the Go type each C return type must have.
var goRet = map[string]reflect.Type{
	"int": typeOf[int32](), "size_t": typeOf[uintptr](), "mlx_dtype": typeOf[mlxDtype](),
	"mlx_array": typeOf[mlxArray](), "mlx_stream": typeOf[mlxStream](), "mlx_string": typeOf[mlxString](),
	"mlx_vector_array": typeOf[mlxVectorArray](), "mlx_vector_string": typeOf[mlxVectorString](),
	"mlx_device": typeOf[mlxDevice](), "mlx_device_info": typeOf[mlxDeviceInfo](),
	"mlx_fast_metal_kernel": typeOf[mlxKernel](), "mlx_fast_metal_kernel_config": typeOf[mlxKernelConfig](),
	"int*": typeOf[*int32](), "char*": typeOf[*byte](), "float*": typeOf[unsafe.Pointer](),
}

func TestSignatureTableMatchesPrototypes(t *testing.T) {
	var a api
	for _, b := range a.bindings() {
		ret, name, params, err := parseProto(b.proto)
		if err != nil {
			t.Fatal(err)
		}
		if name != b.symbol() {
			t.Errorf("symbol() = %q, prototype names %q", b.symbol(), name)
		}
		fp := reflect.TypeOf(b.fn)
		if fp.Kind() != reflect.Pointer || fp.Elem().Kind() != reflect.Func {
			t.Fatalf("%s: binding target is %v, not a pointer to a func", name, fp)
		}
		fn := fp.Elem()
		if fn.NumIn() != len(params) {
			t.Errorf("%s: Go function takes %d arguments, C takes %d", name, fn.NumIn(), len(params))
			continue
		}
		for i, p := range params {
			want, ok := goArg[p.typ]
			if !ok {
				t.Errorf("%s: no Go mapping for C parameter type %q (%s)", name, p.typ, p.name)
				continue
			}
			if p.typ == "bool" && fn.In(i) == typeOf[stackBool]() {
				want = fn.In(i) // a bool past the register arguments (TestStackArgumentsAreWordSized)
			}
			if fn.In(i) != want {
				t.Errorf("%s: argument %d (%s %s) is %v in Go, want %v", name, i, p.typ, p.name, fn.In(i), want)
			}
		}
		switch {
		case ret.typ == "void" && fn.NumOut() != 0:
			t.Errorf("%s: C returns void, Go returns %d values", name, fn.NumOut())
		case ret.typ != "void" && fn.NumOut() != 1:
			t.Errorf("%s: C returns %s, Go returns %d values", name, ret.typ, fn.NumOut())
		case ret.typ != "void" && fn.Out(0) != goRet[ret.typ]:
			t.Errorf("%s: returns %v in Go, want %v for C %s", name, fn.Out(0), goRet[ret.typ], ret.typ)
		}
	}
}

func TestEveryFunctionIsBound(t *testing.T) {
	var a api
	if u := a.unbound(); len(u) > 0 {
		t.Fatalf("api fields with no binding (they would be nil functions): %v", u)
	}
	seen := map[string]abi{}
	for _, b := range a.bindings() {
		prev, dup := seen[b.symbol()]
		if dup && (prev == abiAll || b.abi == abiAll || prev == b.abi) {
			t.Errorf("%s is bound twice for the same mlx-c version", b.symbol())
		}
		seen[b.symbol()] = b.abi
	}
}

// Apple's arm64 ABI packs stack arguments by their natural size, unlike AAPCS64's 8-byte
// slots; keeping every argument that spills past the 8 integer and 8 float registers
// 8 bytes wide makes both layouts the same, whatever purego does with small ones.
func TestStackArgumentsAreWordSized(t *testing.T) {
	var a api
	for _, b := range a.bindings() {
		fn := reflect.TypeOf(b.fn).Elem()
		ints, floats := 0, 0
		for i := 0; i < fn.NumIn(); i++ {
			in := fn.In(i)
			size := in.Size()
			if in.Kind() == reflect.String {
				size = 8 // passed as a char*
			}
			if k := in.Kind(); k == reflect.Float32 || k == reflect.Float64 {
				if floats++; floats > 8 && size != 8 {
					t.Errorf("%s: argument %d (%v) goes on the stack and is not 8 bytes", b.symbol(), i, in)
				}
				continue
			}
			if ints++; ints > 8 && size != 8 {
				t.Errorf("%s: argument %d (%v) goes on the stack and is not 8 bytes", b.symbol(), i, in)
			}
		}
	}
}

// The packed optionals must equal the memory image of the C structs, which is what
// the register holding them carries.
func TestOptionalsMatchCStructLayout(t *testing.T) {
	type cOptInt struct {
		value    int32
		hasValue bool
	}
	type cOptFloat struct {
		value    float32
		hasValue bool
	}
	image := func(p unsafe.Pointer) uint64 {
		var b [8]byte
		copy(b[:], unsafe.Slice((*byte)(p), 5)) // value and has_value; padding is unspecified
		return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32
	}
	for _, v := range []int{0, 1, -1, 64, -123456, 1 << 30} {
		c := cOptInt{int32(v), true}
		if got, want := uint64(someInt(v)), image(unsafe.Pointer(&c)); got != want {
			t.Errorf("someInt(%d) = %#x, C struct image %#x", v, got, want)
		}
	}
	for _, v := range []float32{0, 1e4, -0.5, 3.14159} {
		c := cOptFloat{v, true}
		if got, want := uint64(someFloat(v)), image(unsafe.Pointer(&c)); got != want {
			t.Errorf("someFloat(%v) = %#x, C struct image %#x", v, got, want)
		}
	}
	c := cOptInt{int32(dtFloat16), true}
	if got, want := uint64(someDtype(dtFloat16)), image(unsafe.Pointer(&c)); got != want {
		t.Errorf("someDtype(float16) = %#x, C struct image %#x", got, want)
	}
	var none optInt
	if none&hasValue != 0 {
		t.Error("the zero optional has a value")
	}
}

// The enum values as mlx/c/array.h and device.h declare them.
func TestEnumValues(t *testing.T) {
	for _, c := range []struct {
		got  mlxDtype
		want int32
	}{{dtBool, 0}, {dtUint32, 3}, {dtInt32, 7}, {dtFloat16, 9}, {dtFloat32, 10}, {dtBfloat16, 12}} {
		if int32(c.got) != c.want {
			t.Errorf("dtype %d, header says %d", c.got, c.want)
		}
	}
	if deviceCPU != 0 || deviceGPU != 1 {
		t.Error("mlx_device_type is {MLX_CPU, MLX_GPU}")
	}
}

func TestParseProto(t *testing.T) {
	ret, name, params, err := parseProto("void mlx_set_error_handler(mlx_error_handler_func handler, void* data, void (*dtor)(void*))")
	if err != nil || name != "mlx_set_error_handler" || ret.typ != "void" || len(params) != 3 ||
		params[0].typ != "mlx_error_handler_func" || params[1].typ != "void*" || params[2].typ != "fnptr" {
		t.Fatalf("got %v %q %v %v", ret, name, params, err)
	}
	ret, name, params, err = parseProto("const int* mlx_array_shape(const mlx_array arr)")
	if err != nil || ret.typ != "int*" || name != "mlx_array_shape" || params[0] != (cParam{"mlx_array", "arr"}) {
		t.Fatalf("got %v %q %v %v", ret, name, params, err)
	}
	if _, _, _, err := parseProto("int broken(int)"); err == nil {
		t.Fatal("a parameter without a name parsed")
	}
}
