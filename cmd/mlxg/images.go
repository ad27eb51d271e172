package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mlxg/mlxg/api"
)

// imageExts are the image files a chat prompt can attach by naming them.
var imageExts = []string{".png", ".jpg", ".jpeg", ".webp", ".gif"}

// attachImages finds the image files a prompt names (a word, possibly quoted, that is a path
// starting with /, ./, ../ or ~/ and ending in an image extension, and that exists), as
// `ollama run` does for a vision model: it returns the prompt without them, their bytes and
// their paths. A named image that cannot be read is an error.
func attachImages(text string) (string, []api.ImageData, []string, error) {
	var images []api.ImageData
	var paths []string
	words := strings.Fields(text)
	kept := words[:0:0]
	for _, w := range words {
		p := strings.Trim(w, `"'`)
		ext := strings.ToLower(filepath.Ext(p))
		isPath := strings.HasPrefix(p, "/") || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "~/")
		if !isPath || !slices.Contains(imageExts, ext) {
			kept = append(kept, w)
			continue
		}
		full := p
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			if home, err := os.UserHomeDir(); err == nil {
				full = filepath.Join(home, rest)
			}
		}
		st, err := os.Stat(full)
		if err != nil || st.IsDir() {
			kept = append(kept, w) // not a file: the prompt's own words
			continue
		}
		b, err := os.ReadFile(full)
		if err != nil {
			return "", nil, nil, fmt.Errorf("reading the image %s: %w", p, err)
		}
		images, paths = append(images, b), append(paths, p)
	}
	if len(images) == 0 {
		return text, nil, nil, nil
	}
	return strings.Join(kept, " "), images, paths, nil
}
