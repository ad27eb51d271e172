package safetensors

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// IndexFile is the name of a sharded checkpoint's index.
const IndexFile = "model.safetensors.index.json"

// Checkpoint is every safetensors file of a model directory, opened together.
type Checkpoint struct {
	Dir     string
	Files   []*File
	tensors map[string]*Tensor
	files   map[string]*File // the shard of each tensor
}

// shardFiles lists the files of a checkpoint directory: the shards named by
// model.safetensors.index.json when present, else every *.safetensors file.
// With an index it also returns the tensor -> file map it promises.
func shardFiles(dir string) ([]string, map[string]string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if os.IsNotExist(err) {
		files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if err != nil {
			return nil, nil, err
		}
		if len(files) == 0 {
			return nil, nil, fmt.Errorf("no *.safetensors files in %s", dir)
		}
		sort.Strings(files)
		return files, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, IndexFile), err)
	}
	if len(index.WeightMap) == 0 {
		return nil, nil, fmt.Errorf("%s: weight_map is empty", filepath.Join(dir, IndexFile))
	}
	seen := map[string]bool{}
	var files []string
	for name, file := range index.WeightMap {
		// Shards live beside the index; a path elsewhere is refused, never followed.
		if file == "" || file != filepath.Base(file) || strings.ContainsAny(file, `/\`) || file == "." || file == ".." {
			return nil, nil, fmt.Errorf("%s: tensor %q maps to %q, which is not a file name in the same directory", filepath.Join(dir, IndexFile), name, file)
		}
		if !seen[file] {
			seen[file] = true
			files = append(files, filepath.Join(dir, file))
		}
	}
	sort.Strings(files)
	return files, index.WeightMap, nil
}

// OpenDir maps every shard of the checkpoint in dir and checks that the index (if any)
// agrees with the files and that no tensor appears twice.
func OpenDir(dir string) (*Checkpoint, error) {
	paths, weightMap, err := shardFiles(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, tensors: map[string]*Tensor{}, files: map[string]*File{}}
	owner := map[string]string{}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Files = append(c.Files, f)
		for name, t := range f.tensors {
			if prev, dup := owner[name]; dup {
				c.Close()
				return nil, fmt.Errorf("checkpoint %s: tensor %q is in both %s and %s", dir, name, filepath.Base(prev), filepath.Base(p))
			}
			owner[name] = p
			c.tensors[name] = t
			c.files[name] = f
		}
	}
	for name, file := range weightMap {
		if got, ok := owner[name]; !ok || filepath.Base(got) != file {
			c.Close()
			return nil, fmt.Errorf("checkpoint %s: the index puts tensor %q in %s, but that file does not hold it", dir, name, file)
		}
	}
	return c, nil
}

// Tensor returns the named tensor from whichever shard holds it.
func (c *Checkpoint) Tensor(name string) (*Tensor, bool) {
	t, ok := c.tensors[name]
	return t, ok
}

// Locate returns the file that holds the named tensor and the offset of its data in
// it, for readers that fetch the bytes themselves instead of through the mapping
// (runner/residency).
func (c *Checkpoint) Locate(name string) (path string, off int64, ok bool) {
	t, ok := c.tensors[name]
	if !ok {
		return "", 0, false
	}
	f := c.files[name]
	return f.Path, f.Header.DataOffset + t.Begin, true
}

// Names lists every tensor name, sorted.
func (c *Checkpoint) Names() []string {
	names := make([]string, 0, len(c.tensors))
	for n := range c.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close unmaps every shard.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.Files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	c.Files, c.tensors, c.files = nil, nil, nil
	return first
}

// ReadDirHeaders reads and validates the header of every shard in dir, without mapping data.
func ReadDirHeaders(dir string) ([]*Header, error) {
	paths, _, err := shardFiles(dir)
	if err != nil {
		return nil, err
	}
	var hs []*Header
	for _, p := range paths {
		h, err := ReadHeader(p)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}
