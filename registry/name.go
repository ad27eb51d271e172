package registry

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen bounds every model name mlxg accepts, in bytes.
const MaxNameLen = 256

// DefaultRevision is the revision of a Hub repo named without one.
const DefaultRevision = "main"

// DefaultTag is the tag of a bare name given without one (as in Ollama).
const DefaultTag = "latest"

// LocalOrg is the Hub-cache namespace of models made on this machine (mlxg create):
// the bare name "foo:tag" is the repo "local/foo" at revision "tag" ("latest" is "main").
const LocalOrg = "local"

// Name is a parsed model name. Exactly one of two forms:
//   - a Hub repo: Repo is "org/name", Revision a branch, tag or commit (default "main");
//   - a bare name: Bare is "name:tag" (tag default "latest"), Repo is empty. A bare name is a user alias
//     (made by cp), a model made locally (repo local/name), or a built-in alias; Store.Lookup resolves it.
type Name struct {
	Repo     string
	Revision string
	Bare     string
}

// String gives the name in the form ParseName reads back.
func (n Name) String() string {
	if n.Bare != "" {
		return n.Bare
	}
	if n.Revision == "" || n.Revision == DefaultRevision {
		return n.Repo
	}
	return n.Repo + ":" + n.Revision
}

// IsBare reports whether n is a bare name (alias or local model) rather than a repo.
func (n Name) IsBare() bool { return n.Bare != "" }

// ParseName checks and parses a model name: "org/name[:revision]", "hf.co/org/name[:revision]",
// "huggingface.co/org/name[:revision]" (an "https://" prefix is allowed), or a bare "name[:tag]".
// It rejects, before anything touches the disk, names with "..", absolute paths, backslashes,
// control characters, or more than MaxNameLen bytes.
func ParseName(s string) (Name, error) {
	if err := checkUnsafe(s); err != nil {
		return Name{}, err
	}
	rest := s
	for _, p := range []string{"https://", "http://"} {
		if strings.HasPrefix(strings.ToLower(rest), p) {
			rest = rest[len(p):]
			break
		}
	}
	hosted := false
	for _, host := range []string{"hf.co/", "huggingface.co/", "www.huggingface.co/"} {
		if strings.HasPrefix(strings.ToLower(rest), host) {
			rest, hosted = rest[len(host):], true
			break
		}
	}
	base, rev, hasRev := strings.Cut(rest, ":")
	if hasRev && rev == "" {
		return Name{}, fmt.Errorf("model name %q: empty revision after ':' (write org/name or org/name:revision)", s)
	}
	if !strings.Contains(base, "/") {
		if hosted {
			return Name{}, fmt.Errorf("model name %q: a Hugging Face name needs an organization, as in hf.co/org/name", s)
		}
		return parseBare(s, base, rev)
	}
	org, repo, _ := strings.Cut(base, "/")
	if err := checkRepoPart(s, org); err != nil {
		return Name{}, err
	}
	if err := checkRepoPart(s, repo); err != nil {
		return Name{}, err
	}
	if !hasRev {
		rev = DefaultRevision
	}
	if err := checkRevision(s, rev); err != nil {
		return Name{}, err
	}
	return Name{Repo: org + "/" + repo, Revision: rev}, nil
}

// checkUnsafe rejects what could escape the store or confuse a terminal.
func checkUnsafe(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty model name: give one such as mlx-community/Qwen3-0.6B-4bit or qwen3:0.6b")
	case len(s) > MaxNameLen:
		return fmt.Errorf("model name is %d bytes long; the limit is %d", len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("model name %q is not valid UTF-8", s)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("model name %q contains a control character", s)
	case strings.Contains(s, `\`):
		return fmt.Errorf("model name %q contains a backslash; names use '/' between organization and repo", s)
	case strings.HasPrefix(s, "/"):
		return fmt.Errorf("model name %q is an absolute path; give a name such as org/name (to import a directory use mlxg create NAME --from DIR)", s)
	case strings.Contains(s, ".."):
		return fmt.Errorf("model name %q contains '..'", s)
	}
	return nil
}

// checkRepoPart follows the Hub's repo id rules: letters, digits, '-', '_', '.', at most 96 characters,
// not starting or ending with '-' or '.'; "--" is refused because the cache folder uses it as separator.
func checkRepoPart(full, part string) error {
	bad := func(why string) error {
		return fmt.Errorf("model name %q: %q %s (a Hub name is org/name with letters, digits, '-', '_' and '.')", full, part, why)
	}
	switch {
	case part == "":
		return bad("is empty")
	case len(part) > 96:
		return bad("is longer than 96 characters")
	case strings.Contains(part, "--"):
		return bad("contains '--'")
	case strings.ContainsAny(part[:1], "-.") || strings.ContainsAny(part[len(part)-1:], "-."):
		return bad("starts or ends with '-' or '.'")
	}
	for _, r := range part {
		if !(r < utf8.RuneSelf && (isAlnum(byte(r)) || r == '-' || r == '_' || r == '.')) {
			return bad(fmt.Sprintf("contains %q", r))
		}
	}
	return nil
}

// checkRevision allows branch names (which may contain '/', as refs/pr/1), tags and commit hashes.
func checkRevision(full, rev string) error {
	for _, seg := range strings.Split(rev, "/") {
		if seg == "" || seg == "." {
			return fmt.Errorf("model name %q: revision %q has an empty or '.' path segment", full, rev)
		}
	}
	for _, r := range rev {
		if !(r < utf8.RuneSelf && (isAlnum(byte(r)) || strings.ContainsRune("-_./+", r))) {
			return fmt.Errorf("model name %q: revision %q contains %q (use a branch, tag or commit hash)", full, rev, r)
		}
	}
	return nil
}

func parseBare(full, base, tag string) (Name, error) {
	if tag == "" {
		tag = DefaultTag
	}
	for _, part := range []string{base, tag} {
		if err := checkRepoPart(full, part); err != nil {
			return Name{}, fmt.Errorf("model name %q: a bare name is name[:tag] with letters, digits, '-', '_' and '.' (or give a Hub repo as org/name)", full)
		}
	}
	return Name{Bare: strings.ToLower(base + ":" + tag)}, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// isCommit reports whether rev is a full 40-hex-digit commit hash.
func isCommit(rev string) bool { return len(rev) == 40 && isHex(rev) }

// isHex reports whether s is lowercase hexadecimal.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// localName maps a bare "name:tag" to its repo local/name and revision (tag "latest" is "main").
func localName(bare string) Name {
	base, tag, _ := strings.Cut(bare, ":")
	if tag == DefaultTag {
		tag = DefaultRevision
	}
	return Name{Repo: LocalOrg + "/" + base, Revision: tag}
}

// displayName is how list shows a repo revision: local/foo at main is "foo:latest"; a Hub repo at main is "org/name".
func displayName(repo, rev string) string {
	if org, base, _ := strings.Cut(repo, "/"); org == LocalOrg {
		if rev == DefaultRevision {
			rev = DefaultTag
		}
		return strings.ToLower(base) + ":" + rev
	}
	return Name{Repo: repo, Revision: rev}.String()
}

// repoFolder is the hub cache folder of a model repo: "models--org--name".
func repoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}
