package registry

import "testing"

// TestWantedFileProcessor: pull fetches a vision checkpoint's image preprocessing beside the
// tokenizer, and no video processor or subfolder copy.
func TestWantedFileProcessor(t *testing.T) {
	for name, want := range map[string]bool{
		"preprocessor_config.json": true, "processor_config.json": true, "tokenizer_config.json": true,
		"video_preprocessor_config.json": false, "sub/preprocessor_config.json": false,
	} {
		if wantedFile(name) != want {
			t.Errorf("wantedFile(%q) = %v", name, !want)
		}
	}
}
