package metal

import (
	"math"
	"unsafe"
)

// mlx-c's handles are structs holding one pointer (typedef struct { void* ctx; } mlx_array),
// passed and returned by value. On arm64 (and amd64) such a struct travels in one
// general-purpose register exactly like a pointer-sized integer, so each is a distinct
// uintptr type here: purego passes it as an integer and the types keep them apart.
type (
	mlxArray        uintptr
	mlxStream       uintptr
	mlxVectorArray  uintptr
	mlxVectorString uintptr
	mlxString       uintptr
	mlxDevice       uintptr
	mlxDeviceInfo   uintptr
	mlxKernel       uintptr
	mlxKernelConfig uintptr
	mlxGroup        uintptr // mlx_distributed_group
)

// mlxDtype is the C enum mlx_dtype, in its declaration order.
type mlxDtype int32

const (
	dtBool mlxDtype = iota
	dtUint8
	dtUint16
	dtUint32
	dtUint64
	dtInt8
	dtInt16
	dtInt32
	dtInt64
	dtFloat16
	dtFloat32
	dtFloat64
	dtBfloat16
	dtComplex64
)

// mlxDeviceType is the C enum mlx_device_type.
type mlxDeviceType int32

const (
	deviceCPU mlxDeviceType = iota
	deviceGPU
)

// mlx_optional_int {int value; bool has_value;} and its float and dtype siblings are
// 8-byte structs of mixed classes, so both ABIs pass them in one general-purpose
// register holding their memory image: value in the low 32 bits, has_value in byte 4.
type (
	optInt   uint64
	optFloat uint64
	optDtype uint64
)

const hasValue = 1 << 32

// stackBool is a C bool passed on the stack (past the eighth integer argument): 8 bytes
// wide, so that Apple's arm64 ABI, which packs stack arguments by their natural size,
// and AAPCS64's 8-byte slots put it and what follows at the same offsets. C reads its
// low byte.
type stackBool uint64

func someInt(v int) optInt         { return optInt(uint64(uint32(int32(v))) | hasValue) }
func someFloat(v float32) optFloat { return optFloat(uint64(math.Float32bits(v)) | hasValue) }
func someDtype(d mlxDtype) optDtype {
	return optDtype(uint64(uint32(d)) | hasValue)
}

// api holds one Go function per bound mlx-c symbol; bindings lists them with the C
// prototype each was declared from (mlx-c 0.5.x headers, mlx/c/*.h).
type api struct {
	arrayNew           func() mlxArray
	arrayFree          func(a mlxArray) int32
	arrayNewData       func(data unsafe.Pointer, shape *int32, dim int32, dt mlxDtype) mlxArray
	arrayNewDataMgd    func(data unsafe.Pointer, shape *int32, dim int32, dt mlxDtype, dtor uintptr) mlxArray
	arrayNewFloat      func(v float32) mlxArray
	arrayNewInt        func(v int32) mlxArray
	arrayNdim          func(a mlxArray) uintptr
	arrayShape         func(a mlxArray) *int32
	arrayDtype         func(a mlxArray) mlxDtype
	arraySize          func(a mlxArray) uintptr
	arrayDataFloat32   func(a mlxArray) unsafe.Pointer
	vectorArrayNew     func() mlxVectorArray
	vectorArrayFree    func(v mlxVectorArray) int32
	vectorArrayAppend  func(v mlxVectorArray, a mlxArray) int32
	vectorArraySize    func(v mlxVectorArray) uintptr
	vectorArrayGet     func(res *mlxArray, v mlxVectorArray, i uintptr) int32
	vectorStringNewVal func(s string) mlxVectorString
	vectorStringFree   func(v mlxVectorString) int32
	stringNew          func() mlxString
	stringData         func(s mlxString) *byte
	stringFree         func(s mlxString) int32
	version            func(res *mlxString) int32

	defaultGPUStream  func() mlxStream
	defaultCPUStream  func() mlxStream
	streamFree        func(s mlxStream) int32
	synchronize       func(s mlxStream) int32
	metalIsAvailable  func(res *bool) int32
	cudaIsAvailable   func(res *bool) int32 // nil when the library lacks it
	setErrorHandler   func(handler uintptr, data unsafe.Pointer, dtor uintptr)
	eval              func(outputs mlxVectorArray) int32
	deviceNewType     func(t mlxDeviceType, index int32) mlxDevice
	deviceFree        func(d mlxDevice) int32
	deviceInfoNew     func() mlxDeviceInfo
	deviceInfoGet     func(res *mlxDeviceInfo, d mlxDevice) int32
	deviceInfoFree    func(i mlxDeviceInfo) int32
	deviceInfoHasKey  func(res *bool, i mlxDeviceInfo, key string) int32
	deviceInfoIsStr   func(res *bool, i mlxDeviceInfo, key string) int32
	deviceInfoGetStr  func(res **byte, i mlxDeviceInfo, key string) int32
	deviceInfoGetSize func(res *uintptr, i mlxDeviceInfo, key string) int32

	setWiredLimit   func(res *uintptr, limit uintptr) int32
	setCacheLimit   func(res *uintptr, limit uintptr) int32
	setMemoryLimit  func(res *uintptr, limit uintptr) int32
	getActiveMemory func(res *uintptr) int32
	getPeakMemory   func(res *uintptr) int32
	resetPeakMemory func() int32
	getCacheMemory  func(res *uintptr) int32
	clearCache      func() int32

	rmsNorm func(res *mlxArray, x, w mlxArray, eps float32, s mlxStream) int32
	rope    func(res *mlxArray, x mlxArray, dims int32, traditional bool, base optFloat, scale float32, offset int32, freqs mlxArray, s mlxStream) int32
	sdpa    func(res *mlxArray, q, k, v mlxArray, scale float32, maskMode string, mask, sinks mlxArray, s mlxStream) int32

	kernelNew          func(name string, inputs, outputs mlxVectorString, source, header string, rowContiguous, atomicOutputs bool) mlxKernel
	kernelFree         func(k mlxKernel)
	kernelApply        func(outputs *mlxVectorArray, k mlxKernel, inputs mlxVectorArray, cfg mlxKernelConfig, s mlxStream) int32
	kernelConfigNew    func() mlxKernelConfig
	kernelConfigFree   func(c mlxKernelConfig)
	kernelAddOutput    func(c mlxKernelConfig, shape *int32, n uintptr, dt mlxDtype) int32
	kernelSetGrid      func(c mlxKernelConfig, x, y, z int32) int32
	kernelSetGroup     func(c mlxKernelConfig, x, y, z int32) int32
	kernelTemplateType func(c mlxKernelConfig, name string, dt mlxDtype) int32
	kernelTemplateInt  func(c mlxKernelConfig, name string, v int32) int32

	quantizedMatmul func(res *mlxArray, x, w, scales, biases mlxArray, transpose bool, group, bits optInt, mode string, s mlxStream) int32
	// dequantize and quantize gained a global_scale argument in mlx-c 0.6: both
	// forms are bound, the loader keeps the one the library's version has.
	dequantize05 func(res *mlxArray, w, scales, biases mlxArray, group, bits optInt, mode string, dt optDtype, s mlxStream) int32
	dequantize06 func(res *mlxArray, w, scales, biases mlxArray, group, bits optInt, mode string, globalScale mlxArray, dt optDtype, s mlxStream) int32
	quantize05   func(res *mlxVectorArray, w mlxArray, group, bits optInt, mode string, s mlxStream) int32
	quantize06   func(res *mlxVectorArray, w mlxArray, group, bits optInt, mode string, globalScale mlxArray, s mlxStream) int32

	matmul        func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	add           func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	multiply      func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	greater       func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	where         func(res *mlxArray, cond, x, y mlxArray, s mlxStream) int32
	sigmoid       func(res *mlxArray, a mlxArray, s mlxStream) int32
	reshape       func(res *mlxArray, a mlxArray, shape *int32, n uintptr, s mlxStream) int32
	transposeAxes func(res *mlxArray, a mlxArray, axes *int32, n uintptr, s mlxStream) int32
	astype        func(res *mlxArray, a mlxArray, dt mlxDtype, s mlxStream) int32
	takeAxis      func(res *mlxArray, a, indices mlxArray, axis int32, s mlxStream) int32
	softmaxAxis   func(res *mlxArray, a mlxArray, axis int32, precise bool, s mlxStream) int32
	slice         func(res *mlxArray, a mlxArray, start *int32, nStart uintptr, stop *int32, nStop uintptr, strides *int32, nStrides uintptr, s mlxStream) int32
	sliceUpdate   func(res *mlxArray, src, update mlxArray, start *int32, nStart uintptr, stop *int32, nStop uintptr, strides *int32, nStrides uintptr, s mlxStream) int32
	view          func(res *mlxArray, a mlxArray, dt mlxDtype, s mlxStream) int32
	contiguous    func(res *mlxArray, a mlxArray, allowColMajor bool, s mlxStream) int32
	arange        func(res *mlxArray, start, stop, step float64, dt mlxDtype, s mlxStream) int32
	expandDims    func(res *mlxArray, a mlxArray, axis int32, s mlxStream) int32
	concatenate   func(res *mlxArray, arrays mlxVectorArray, axis int32, s mlxStream) int32
	broadcastTo   func(res *mlxArray, a mlxArray, shape *int32, n uintptr, s mlxStream) int32

	// The operations of the mixture-of-experts, Gemma and Gated DeltaNet layers.
	gatherMM      func(res *mlxArray, a, b, lhsIndices, rhsIndices mlxArray, sorted bool, s mlxStream) int32
	gatherQMM     func(res *mlxArray, x, w, scales, biases, lhsIndices, rhsIndices mlxArray, transpose bool, group, bits optInt, mode string, sorted stackBool, s mlxStream) int32
	argpartition  func(res *mlxArray, a mlxArray, kth, axis int32, s mlxStream) int32
	takeAlongAxis func(res *mlxArray, a, indices mlxArray, axis int32, s mlxStream) int32
	sumAxis       func(res *mlxArray, a mlxArray, axis int32, keepdims bool, s mlxStream) int32
	subtract      func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	divide        func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	negative      func(res *mlxArray, a mlxArray, s mlxStream) int32
	exp           func(res *mlxArray, a mlxArray, s mlxStream) int32
	tanh          func(res *mlxArray, a mlxArray, s mlxStream) int32
	rsqrt         func(res *mlxArray, a mlxArray, s mlxStream) int32
	square        func(res *mlxArray, a mlxArray, s mlxStream) int32
	logaddexp     func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	hadamard      func(res *mlxArray, a mlxArray, scale optFloat, s mlxStream) int32
	maximum       func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	minimum       func(res *mlxArray, a, b mlxArray, s mlxStream) int32
	erf           func(res *mlxArray, a mlxArray, s mlxStream) int32

	// The vision towers' operations (vision.go).
	layerNorm func(res *mlxArray, x, w, b mlxArray, eps float32, s mlxStream) int32

	// MLX's distributed layer (distributed.go); optional, nil in a library without it.
	distInit  func(res *mlxGroup, strict bool, backend string) int32
	groupRank func(g mlxGroup) int32
	groupSize func(g mlxGroup) int32
	groupFree func(g mlxGroup) int32
	allSum    func(res *mlxArray, x mlxArray, g mlxGroup, s mlxStream) int32
	allGather func(res *mlxArray, x mlxArray, g mlxGroup, s mlxStream) int32
	send      func(res *mlxArray, x mlxArray, dst int32, g mlxGroup, s mlxStream) int32
	recv      func(res *mlxArray, shape *int32, n uintptr, dt mlxDtype, src int32, g mlxGroup, s mlxStream) int32
}

// abi says which mlx-c versions declare a symbol in the bound form.
type abi uint8

const (
	abiAll      abi = iota // 0.5.x and 0.6.x
	abi05                  // only 0.5.x
	abi06                  // only 0.6.x
	abiOptional            // bound when the library has it, else left nil
)

// binding ties a symbol to its C prototype and the Go function field that calls it.
type binding struct {
	proto string // as declared in mlx/c/*.h, parameter comments dropped
	fn    any    // pointer to the api field
	abi   abi
}

// symbol is the C name in b.proto.
func (b binding) symbol() string {
	open := 0
	for i := 0; i < len(b.proto); i++ {
		if b.proto[i] == '(' {
			open = i
			break
		}
	}
	start := open
	for start > 0 && (isIdent(b.proto[start-1])) {
		start--
	}
	return b.proto[start:open]
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (a *api) bindings() []binding {
	return []binding{
		{"mlx_array mlx_array_new(void)", &a.arrayNew, abiAll},
		{"int mlx_array_free(mlx_array arr)", &a.arrayFree, abiAll},
		{"mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype dtype)", &a.arrayNewData, abiAll},
		{"mlx_array mlx_array_new_data_managed(void* data, const int* shape, int dim, mlx_dtype dtype, void (*dtor)(void*))", &a.arrayNewDataMgd, abiAll},
		{"mlx_array mlx_array_new_float(float val)", &a.arrayNewFloat, abiAll},
		{"mlx_array mlx_array_new_int(int val)", &a.arrayNewInt, abiAll},
		{"size_t mlx_array_ndim(const mlx_array arr)", &a.arrayNdim, abiAll},
		{"const int* mlx_array_shape(const mlx_array arr)", &a.arrayShape, abiAll},
		{"mlx_dtype mlx_array_dtype(const mlx_array arr)", &a.arrayDtype, abiAll},
		{"size_t mlx_array_size(const mlx_array arr)", &a.arraySize, abiAll},
		{"const float* mlx_array_data_float32(const mlx_array arr)", &a.arrayDataFloat32, abiAll},
		{"mlx_vector_array mlx_vector_array_new(void)", &a.vectorArrayNew, abiAll},
		{"int mlx_vector_array_free(mlx_vector_array vec)", &a.vectorArrayFree, abiAll},
		{"int mlx_vector_array_append_value(mlx_vector_array vec, const mlx_array val)", &a.vectorArrayAppend, abiAll},
		{"size_t mlx_vector_array_size(mlx_vector_array vec)", &a.vectorArraySize, abiAll},
		{"int mlx_vector_array_get(mlx_array* res, const mlx_vector_array vec, size_t idx)", &a.vectorArrayGet, abiAll},
		{"mlx_vector_string mlx_vector_string_new_value(const char* val)", &a.vectorStringNewVal, abiAll},
		{"int mlx_vector_string_free(mlx_vector_string vec)", &a.vectorStringFree, abiAll},
		{"mlx_string mlx_string_new(void)", &a.stringNew, abiAll},
		{"const char* mlx_string_data(mlx_string str)", &a.stringData, abiAll},
		{"int mlx_string_free(mlx_string str)", &a.stringFree, abiAll},
		{"int mlx_version(mlx_string* str_)", &a.version, abiAll},

		{"mlx_stream mlx_default_gpu_stream_new(void)", &a.defaultGPUStream, abiAll},
		{"mlx_stream mlx_default_cpu_stream_new(void)", &a.defaultCPUStream, abiAll},
		{"int mlx_stream_free(mlx_stream stream)", &a.streamFree, abiAll},
		{"int mlx_synchronize(mlx_stream stream)", &a.synchronize, abiAll},
		{"int mlx_metal_is_available(bool* res)", &a.metalIsAvailable, abiAll},
		{"int mlx_cuda_is_available(bool* res)", &a.cudaIsAvailable, abiOptional},
		{"void mlx_set_error_handler(mlx_error_handler_func handler, void* data, void (*dtor)(void*))", &a.setErrorHandler, abiAll},
		{"int mlx_eval(const mlx_vector_array outputs)", &a.eval, abiAll},
		{"mlx_device mlx_device_new_type(mlx_device_type type, int index)", &a.deviceNewType, abiAll},
		{"int mlx_device_free(mlx_device dev)", &a.deviceFree, abiAll},
		{"mlx_device_info mlx_device_info_new(void)", &a.deviceInfoNew, abiAll},
		{"int mlx_device_info_get(mlx_device_info* info, mlx_device dev)", &a.deviceInfoGet, abiAll},
		{"int mlx_device_info_free(mlx_device_info info)", &a.deviceInfoFree, abiAll},
		{"int mlx_device_info_has_key(bool* exists, mlx_device_info info, const char* key)", &a.deviceInfoHasKey, abiAll},
		{"int mlx_device_info_is_string(bool* is_string, mlx_device_info info, const char* key)", &a.deviceInfoIsStr, abiAll},
		{"int mlx_device_info_get_string(const char** value, mlx_device_info info, const char* key)", &a.deviceInfoGetStr, abiAll},
		{"int mlx_device_info_get_size(size_t* value, mlx_device_info info, const char* key)", &a.deviceInfoGetSize, abiAll},

		{"int mlx_set_wired_limit(size_t* res, size_t limit)", &a.setWiredLimit, abiAll},
		{"int mlx_set_cache_limit(size_t* res, size_t limit)", &a.setCacheLimit, abiAll},
		{"int mlx_set_memory_limit(size_t* res, size_t limit)", &a.setMemoryLimit, abiAll},
		{"int mlx_get_active_memory(size_t* res)", &a.getActiveMemory, abiAll},
		{"int mlx_get_peak_memory(size_t* res)", &a.getPeakMemory, abiAll},
		{"int mlx_reset_peak_memory(void)", &a.resetPeakMemory, abiAll},
		{"int mlx_get_cache_memory(size_t* res)", &a.getCacheMemory, abiAll},
		{"int mlx_clear_cache(void)", &a.clearCache, abiAll},

		{"int mlx_fast_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s)", &a.rmsNorm, abiAll},
		{"int mlx_fast_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, int offset, const mlx_array freqs, const mlx_stream s)", &a.rope, abiAll},
		{"int mlx_fast_scaled_dot_product_attention(mlx_array* res, const mlx_array queries, const mlx_array keys, const mlx_array values, float scale, const char* mask_mode, const mlx_array mask_arr, const mlx_array sinks, const mlx_stream s)", &a.sdpa, abiAll},
		{"mlx_fast_metal_kernel mlx_fast_metal_kernel_new(const char* name, const mlx_vector_string input_names, const mlx_vector_string output_names, const char* source, const char* header, bool ensure_row_contiguous, bool atomic_outputs)", &a.kernelNew, abiAll},
		{"void mlx_fast_metal_kernel_free(mlx_fast_metal_kernel cls)", &a.kernelFree, abiAll},
		{"int mlx_fast_metal_kernel_apply(mlx_vector_array* outputs, mlx_fast_metal_kernel cls, const mlx_vector_array inputs, const mlx_fast_metal_kernel_config config, const mlx_stream stream)", &a.kernelApply, abiAll},
		{"mlx_fast_metal_kernel_config mlx_fast_metal_kernel_config_new(void)", &a.kernelConfigNew, abiAll},
		{"void mlx_fast_metal_kernel_config_free(mlx_fast_metal_kernel_config cls)", &a.kernelConfigFree, abiAll},
		{"int mlx_fast_metal_kernel_config_add_output_arg(mlx_fast_metal_kernel_config cls, const int* shape, size_t size, mlx_dtype dtype)", &a.kernelAddOutput, abiAll},
		{"int mlx_fast_metal_kernel_config_set_grid(mlx_fast_metal_kernel_config cls, int grid1, int grid2, int grid3)", &a.kernelSetGrid, abiAll},
		{"int mlx_fast_metal_kernel_config_set_thread_group(mlx_fast_metal_kernel_config cls, int thread1, int thread2, int thread3)", &a.kernelSetGroup, abiAll},
		{"int mlx_fast_metal_kernel_config_add_template_arg_dtype(mlx_fast_metal_kernel_config cls, const char* name, mlx_dtype dtype)", &a.kernelTemplateType, abiAll},
		{"int mlx_fast_metal_kernel_config_add_template_arg_int(mlx_fast_metal_kernel_config cls, const char* name, int value)", &a.kernelTemplateInt, abiAll},

		{"int mlx_quantized_matmul(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases, bool transpose, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_stream s)", &a.quantizedMatmul, abiAll},
		{"int mlx_dequantize(mlx_array* res, const mlx_array w, const mlx_array scales, const mlx_array biases, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, mlx_optional_dtype dtype, const mlx_stream s)", &a.dequantize05, abi05},
		{"int mlx_dequantize(mlx_array* res, const mlx_array w, const mlx_array scales, const mlx_array biases, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_array global_scale, mlx_optional_dtype dtype, const mlx_stream s)", &a.dequantize06, abi06},
		{"int mlx_quantize(mlx_vector_array* res, const mlx_array w, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_stream s)", &a.quantize05, abi05},
		{"int mlx_quantize(mlx_vector_array* res, const mlx_array w, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_array global_scale, const mlx_stream s)", &a.quantize06, abi06},

		{"int mlx_matmul(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.matmul, abiAll},
		{"int mlx_add(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.add, abiAll},
		{"int mlx_multiply(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.multiply, abiAll},
		{"int mlx_greater(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.greater, abiAll},
		{"int mlx_where(mlx_array* res, const mlx_array condition, const mlx_array x, const mlx_array y, const mlx_stream s)", &a.where, abiAll},
		{"int mlx_sigmoid(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.sigmoid, abiAll},
		{"int mlx_reshape(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const mlx_stream s)", &a.reshape, abiAll},
		{"int mlx_transpose_axes(mlx_array* res, const mlx_array a, const int* axes, size_t axes_num, const mlx_stream s)", &a.transposeAxes, abiAll},
		{"int mlx_astype(mlx_array* res, const mlx_array a, mlx_dtype dtype, const mlx_stream s)", &a.astype, abiAll},
		{"int mlx_take_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s)", &a.takeAxis, abiAll},
		{"int mlx_softmax_axis(mlx_array* res, const mlx_array a, int axis, bool precise, const mlx_stream s)", &a.softmaxAxis, abiAll},
		{"int mlx_slice(mlx_array* res, const mlx_array a, const int* start, size_t start_num, const int* stop, size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s)", &a.slice, abiAll},
		{"int mlx_slice_update(mlx_array* res, const mlx_array src, const mlx_array update, const int* start, size_t start_num, const int* stop, size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s)", &a.sliceUpdate, abiAll},
		{"int mlx_view(mlx_array* res, const mlx_array a, mlx_dtype dtype, const mlx_stream s)", &a.view, abiAll},
		{"int mlx_contiguous(mlx_array* res, const mlx_array a, bool allow_col_major, const mlx_stream s)", &a.contiguous, abiAll},
		{"int mlx_arange(mlx_array* res, double start, double stop, double step, mlx_dtype dtype, const mlx_stream s)", &a.arange, abiAll},
		{"int mlx_expand_dims(mlx_array* res, const mlx_array a, int axis, const mlx_stream s)", &a.expandDims, abiAll},
		{"int mlx_concatenate_axis(mlx_array* res, const mlx_vector_array arrays, int axis, const mlx_stream s)", &a.concatenate, abiAll},
		{"int mlx_broadcast_to(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const mlx_stream s)", &a.broadcastTo, abiAll},

		{"int mlx_gather_mm(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_array lhs_indices, const mlx_array rhs_indices, bool sorted_indices, const mlx_stream s)", &a.gatherMM, abiAll},
		{"int mlx_gather_qmm(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases, const mlx_array lhs_indices, const mlx_array rhs_indices, bool transpose, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, bool sorted_indices, const mlx_stream s)", &a.gatherQMM, abiAll},
		{"int mlx_argpartition_axis(mlx_array* res, const mlx_array a, int kth, int axis, const mlx_stream s)", &a.argpartition, abiAll},
		{"int mlx_take_along_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s)", &a.takeAlongAxis, abiAll},
		{"int mlx_sum_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s)", &a.sumAxis, abiAll},
		{"int mlx_subtract(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.subtract, abiAll},
		{"int mlx_divide(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.divide, abiAll},
		{"int mlx_negative(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.negative, abiAll},
		{"int mlx_exp(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.exp, abiAll},
		{"int mlx_tanh(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.tanh, abiAll},
		{"int mlx_rsqrt(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.rsqrt, abiAll},
		{"int mlx_square(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.square, abiAll},
		{"int mlx_logaddexp(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.logaddexp, abiAll},
		{"int mlx_hadamard_transform(mlx_array* res, const mlx_array a, mlx_optional_float scale, const mlx_stream s)", &a.hadamard, abiAll},
		{"int mlx_maximum(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.maximum, abiAll},
		{"int mlx_minimum(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)", &a.minimum, abiAll},
		{"int mlx_erf(mlx_array* res, const mlx_array a, const mlx_stream s)", &a.erf, abiAll},

		{"int mlx_fast_layer_norm(mlx_array* res, const mlx_array x, const mlx_array weight, const mlx_array bias, float eps, const mlx_stream s)", &a.layerNorm, abiAll},

		{"int mlx_distributed_init(mlx_distributed_group* res, bool strict, const char* bk)", &a.distInit, abiOptional},
		{"int mlx_distributed_group_rank(mlx_distributed_group group)", &a.groupRank, abiOptional},
		{"int mlx_distributed_group_size(mlx_distributed_group group)", &a.groupSize, abiOptional},
		{"int mlx_distributed_group_free(mlx_distributed_group group)", &a.groupFree, abiOptional},
		{"int mlx_distributed_all_sum(mlx_array* res, const mlx_array x, const mlx_distributed_group group, const mlx_stream s)", &a.allSum, abiOptional},
		{"int mlx_distributed_all_gather(mlx_array* res, const mlx_array x, const mlx_distributed_group group, const mlx_stream s)", &a.allGather, abiOptional},
		{"int mlx_distributed_send(mlx_array* res, const mlx_array x, int dst, const mlx_distributed_group group, const mlx_stream s)", &a.send, abiOptional},
		{"int mlx_distributed_recv(mlx_array* res, const int* shape, size_t shape_num, mlx_dtype dtype, int src, const mlx_distributed_group group, const mlx_stream s)", &a.recv, abiOptional},
	}
}
