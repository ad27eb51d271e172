package main

import (
	"testing"

	"github.com/spf13/pflag"
)

func TestServeNumDraft(t *testing.T) {
	cases := []struct {
		args []string
		env  string
		want int
		bad  bool
	}{
		{nil, "", 0, false}, // the built-in default
		{[]string{"--num-draft", "4"}, "", 4, false},
		{[]string{"--num-draft-tokens", "0"}, "", -1, false}, // mlx-lm's name; 0 turns it off
		{nil, "6", 6, false},
		{nil, "0", -1, false},
		{[]string{"--num-draft", "2"}, "6", 2, false}, // the flag wins
		{nil, "many", 0, true},
		{[]string{"--num-draft", "1000"}, "", 0, true},
	}
	for _, c := range cases {
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		var n int
		registerDraftFlags(f, &n, "default")
		if err := f.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got, err := serveNumDraft(f, n, func(k string) string {
			if k == "MLXG_NUM_DRAFT" {
				return c.env
			}
			return ""
		})
		if (err != nil) != c.bad || !c.bad && got != c.want {
			t.Errorf("%v MLXG_NUM_DRAFT=%q: %d, %v; want %d (error: %v)", c.args, c.env, got, err, c.want, c.bad)
		}
	}
}

func TestServeDraftModel(t *testing.T) {
	cases := []struct {
		args []string
		env  string
		want string
		bad  bool
	}{
		{nil, "", "", false},
		{[]string{"--draft-model", "qwen3:0.6b"}, "", "qwen3:0.6b", false},
		{nil, " qwen3:0.6b ", "qwen3:0.6b", false},
		{[]string{"--draft-model", "small"}, "other", "small", false}, // the flag wins
		{nil, "no spaces allowed", "", true},
	}
	for _, c := range cases {
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		var name string
		f.StringVar(&name, "draft-model", "", "")
		if err := f.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got, err := serveDraftModel(f, name, func(k string) string {
			if k == "MLXG_DRAFT_MODEL" {
				return c.env
			}
			return ""
		})
		if (err != nil) != c.bad || !c.bad && got != c.want {
			t.Errorf("%v MLXG_DRAFT_MODEL=%q: %q, %v; want %q (error: %v)", c.args, c.env, got, err, c.want, c.bad)
		}
	}
}
