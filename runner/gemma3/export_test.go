package gemma3

// EncodeBuffers is encodeBuffers, for the memory test.
var EncodeBuffers = encodeBuffers
