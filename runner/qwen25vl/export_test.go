package qwen25vl

// EncodeBuffers exposes encodeBuffers to the external tests.
func EncodeBuffers(vc VisionConfig, n int) int64 { return encodeBuffers(vc, n) }
