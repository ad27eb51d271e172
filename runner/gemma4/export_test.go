package gemma4

// EncodeBuffers is encodeBuffers, for the memory test.
var EncodeBuffers = encodeBuffers
