package registry

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Modelfile is what `ollama create` (a Modelfile's PARAMETER, SYSTEM, MESSAGE and LICENSE lines) adds to a
// model: default options applied before a request's own, a system prompt used when a request has none,
// messages put before every conversation, and licenses. mlxg keeps it in state.json under the bare name it
// was created as; the weights are the FROM model's, shared, not copied.
type Modelfile struct {
	From       string         `json:"from,omitempty"`       // the name it was created from, as given
	Parameters map[string]any `json:"parameters,omitempty"` // option name -> value (stop: a list of strings)
	System     string         `json:"system,omitempty"`
	Messages   []Message      `json:"messages,omitempty"`
	License    []string       `json:"license,omitempty"`
}

// Param is the parameter name's value; nil when mf is nil or has none.
func (mf *Modelfile) Param(name string) any {
	if mf == nil {
		return nil
	}
	return mf.Parameters[name]
}

// Message is one message of a Modelfile's MESSAGE lines.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Merge returns base with add on top, as Ollama layers a created model over its FROM model: add's
// parameters replace base's of the same name and keep the others, add's system prompt and messages
// replace base's when given, and licenses accumulate. Either may be nil.
func (base *Modelfile) Merge(add *Modelfile) *Modelfile {
	out := &Modelfile{}
	if base != nil {
		out.Parameters = maps.Clone(base.Parameters)
		out.System, out.Messages, out.License = base.System, slices.Clone(base.Messages), slices.Clone(base.License)
	}
	if add == nil {
		return out
	}
	out.From = add.From
	for k, v := range add.Parameters {
		if out.Parameters == nil {
			out.Parameters = map[string]any{}
		}
		out.Parameters[k] = v
	}
	if add.System != "" {
		out.System = add.System
	}
	if len(add.Messages) > 0 {
		out.Messages = slices.Clone(add.Messages)
	}
	out.License = append(out.License, add.License...)
	return out
}

// Derive makes dst, a bare name, the model from with mf: an alias pinned to from's commit (like cp), or,
// when dst names a model made by create and from is that same model, that model with mf. A model made by
// create under dst from other weights is refused (remove it first), as cp refuses it.
func (s *Store) Derive(from *LocalModel, dst Name, mf *Modelfile) (*LocalModel, error) {
	if !dst.IsBare() {
		return nil, fmt.Errorf("create FROM a model makes a name without '/', such as mymodel or mymodel:v1, not %q", dst)
	}
	local := localName(dst.Bare)
	isLocal := s.hasRef(local.Repo, local.Revision)
	if isLocal {
		if commit, err := s.readRef(local.Repo, local.Revision); err != nil || from.Repo != local.Repo || from.Commit != commit {
			return nil, fmt.Errorf("%s is a model made with mlxg create from other weights (%s); remove it first (mlxg rm %s) or create another name", dst, local, dst)
		}
	}
	err := s.updateState(func(st *state) error {
		if !isLocal {
			st.Aliases[dst.Bare] = alias{Repo: from.Repo, Commit: from.Commit, Created: time.Now().UTC()}
		}
		if st.Modelfiles == nil {
			st.Modelfiles = map[string]*Modelfile{}
		}
		st.Modelfiles[dst.Bare] = mf
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Resolve(dst)
}
