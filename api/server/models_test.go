package server

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
)

func TestModelsShowAndList(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	root := t.TempDir()
	m := &Models{Store: &registry.Store{HubCache: filepath.Join(root, "hub"), Home: filepath.Join(root, "home")}}
	ctx := context.Background()
	n, _ := registry.ParseName("qwen3-tiny")
	if _, err := m.Store.ImportDir(ctx, n, dir); err != nil {
		t.Fatal(err)
	}
	show, err := m.Show(ctx, &api.ShowRequest{Model: "qwen3-tiny", Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	d := show.Details
	if d.Family != "qwen3" || d.Format != "safetensors" || d.QuantizationLevel != "F16" || d.ParameterSize == "" {
		t.Errorf("details = %+v", d)
	}
	if show.ModelInfo["qwen3.context_length"] != 4096 || show.ModelInfo["general.architecture"] != "qwen3" {
		t.Errorf("model_info = %v", show.ModelInfo)
	}
	if show.Template == "" || !slices.Contains(show.Capabilities, "completion") || !slices.Contains(show.Capabilities, "tools") ||
		slices.Contains(show.Capabilities, "embedding") {
		t.Errorf("template %d bytes, capabilities %v", len(show.Template), show.Capabilities)
	}
	if len(show.Tensors) == 0 {
		t.Error("verbose show listed no tensors")
	}
	list, err := m.List(ctx)
	if err != nil || len(list.Models) != 1 || list.Models[0].Name != "qwen3-tiny:latest" || !reflect.DeepEqual(list.Models[0].Details, d) {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := m.Copy(ctx, &api.CopyRequest{Source: "qwen3-tiny", Destination: "org/x"}); err == nil {
		t.Error("copy to a repo name accepted")
	}
	if err := m.Delete(ctx, &api.DeleteRequest{Model: "../x"}); err == nil {
		t.Error("delete of a bad name accepted")
	}
}
