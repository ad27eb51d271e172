package server

import (
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/model"
)

// Pull and create refuse a checkpoint whose architecture no registered one runs once config.json is read,
// before any weight is downloaded or converted. registry sits below runner/model, so the check is handed
// down from here: every program that serves models (mlxg, in-process or through a server) links this
// package, and the list the refusal gives is the registry's at run time.
func init() { registry.SetArchitectureCheck(model.CheckConfig) }
