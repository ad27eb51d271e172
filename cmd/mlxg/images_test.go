package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttachImages: image paths that exist are taken out of the prompt and attached; other
// words, missing files and other extensions stay.
func TestAttachImages(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.png")
	b := filepath.Join(dir, "B.JPG")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("img:"+filepath.Base(p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text, images, paths, err := attachImages("what is in " + a + " and '" + b + "' but not /nope/x.png or " + dir + "/notes.txt?")
	if err != nil {
		t.Fatal(err)
	}
	if text != "what is in and but not /nope/x.png or "+dir+"/notes.txt?" || len(images) != 2 || string(images[1]) != "img:B.JPG" || paths[0] != a {
		t.Fatalf("%q %q %v", text, images, paths)
	}
	if text, images, _, _ := attachImages("no images here"); text != "no images here" || images != nil {
		t.Fatalf("%q %v", text, images)
	}
}
