package constrain

import (
	"errors"
	"fmt"
	"math"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
)

// A string with a pattern (or an enforced format) is generated in printable ASCII, plus
// the characters JSON writes as the short escapes: the pattern becomes a DFA over those
// characters, built whole when the schema compiles.

// patternChars are the characters a pattern string may hold: printable ASCII and
// \b \t \n \f \r (written as escapes).
var patternChars = func() []byte {
	var cs []byte
	for c := 0x20; c < 0x7f; c++ {
		cs = append(cs, byte(c))
	}
	return append(cs, '\b', '\t', '\n', '\f', '\r')
}()

const maxDFAStates = 4096

type dfa struct {
	next    [][128]int32 // next[s][c]: the state after c, -1 dead (no match reachable)
	match   []bool
	minDist []int32 // fewest characters from s to a match
	maxDist []int32 // most characters from s to a match (math.MaxInt32: unbounded)
}

// compilePattern compiles a JSON Schema pattern (an ECMA-262 regular expression, searched
// for anywhere in the string unless anchored) with Go's RE2 syntax, which shares the common
// subset; lookaround and backreferences are errors.
func compilePattern(pattern string) (*dfa, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("not a supported regular expression (RE2 syntax, no lookaround or backreferences): %v", err)
	}
	// Unanchored search: any text before and after.
	anyText := &syntax.Regexp{Op: syntax.OpStar, Sub: []*syntax.Regexp{{Op: syntax.OpAnyChar}}}
	re = &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{anyText, re, anyText}}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, err
	}
	b := &dfaBuilder{prog: prog, ids: map[string]int32{}}
	start := b.closure(nil, []uint32{uint32(prog.Start)}, true)
	if _, err := b.state(start); err != nil {
		return nil, err
	}
	d := &dfa{}
	for i := 0; i < len(b.sets); i++ {
		set := b.sets[i]
		var row [128]int32
		for c := range row {
			row[c] = -1
		}
		for _, c := range patternChars {
			var moved []uint32
			for _, pc := range set {
				in := &prog.Inst[pc]
				switch in.Op {
				case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
					if in.MatchRune(rune(c)) {
						moved = append(moved, in.Out)
					}
				}
			}
			if len(moved) == 0 {
				continue
			}
			id, err := b.state(b.closure(nil, moved, false))
			if err != nil {
				return nil, err
			}
			row[c] = id
		}
		d.next = append(d.next, row)
		d.match = append(d.match, b.matches(set))
	}
	if b.unsupported != "" {
		return nil, errors.New(b.unsupported)
	}
	d.distances()
	// Prune states from which no match is reachable.
	for s := range d.next {
		for c, t := range d.next[s] {
			if t >= 0 && d.minDist[t] == math.MaxInt32 {
				d.next[s][c] = -1
			}
		}
	}
	return d, nil
}

type dfaBuilder struct {
	prog        *syntax.Prog
	ids         map[string]int32
	sets        [][]uint32
	unsupported string
}

// closure follows the empty transitions from pcs; at the start of the text ^ holds. $ is
// kept in the set and checked by matches.
func (b *dfaBuilder) closure(dst, pcs []uint32, begin bool) []uint32 {
	seen := map[uint32]bool{}
	var walk func(pc uint32)
	walk = func(pc uint32) {
		if seen[pc] {
			return
		}
		seen[pc] = true
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			walk(in.Out)
			walk(in.Arg)
		case syntax.InstCapture, syntax.InstNop:
			walk(in.Out)
		case syntax.InstEmptyWidth:
			switch syntax.EmptyOp(in.Arg) {
			case syntax.EmptyBeginText, syntax.EmptyBeginLine:
				if begin {
					walk(in.Out)
				}
			case syntax.EmptyEndText, syntax.EmptyEndLine:
				dst = append(dst, pc)
			default:
				b.unsupported = "word boundaries (\\b, \\B) are not supported"
			}
		case syntax.InstFail:
		default:
			dst = append(dst, pc)
		}
	}
	for _, pc := range pcs {
		walk(pc)
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}

func (b *dfaBuilder) state(set []uint32) (int32, error) {
	var key strings.Builder
	for _, pc := range set {
		key.WriteString(strconv.FormatUint(uint64(pc), 36))
		key.WriteByte(',')
	}
	if id, ok := b.ids[key.String()]; ok {
		return id, nil
	}
	if len(b.sets) >= maxDFAStates {
		return 0, fmt.Errorf("the pattern needs more than %d automaton states: simplify it", maxDFAStates)
	}
	id := int32(len(b.sets))
	b.ids[key.String()] = id
	b.sets = append(b.sets, set)
	return id, nil
}

// matches reports whether the text may end in the state: a match is reachable through $.
func (b *dfaBuilder) matches(set []uint32) bool {
	seen := map[uint32]bool{}
	var walk func(pc uint32) bool
	walk = func(pc uint32) bool {
		if seen[pc] {
			return false
		}
		seen[pc] = true
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			return walk(in.Out) || walk(in.Arg)
		case syntax.InstCapture, syntax.InstNop:
			return walk(in.Out)
		case syntax.InstEmptyWidth:
			switch syntax.EmptyOp(in.Arg) {
			case syntax.EmptyEndText, syntax.EmptyEndLine:
				return walk(in.Out)
			}
		}
		return false
	}
	for _, pc := range set {
		if walk(pc) {
			return true
		}
	}
	return false
}

// distances computes minDist (breadth-first search backwards from the matching states)
// and maxDist (longest path; unbounded when a cycle lies on a path to a match).
func (d *dfa) distances() {
	n := len(d.next)
	const inf = math.MaxInt32
	d.minDist = make([]int32, n)
	rev := make([][]int32, n)
	for s := range d.next {
		for _, t := range d.next[s] {
			if t >= 0 {
				rev[t] = append(rev[t], int32(s))
			}
		}
	}
	var queue []int32
	for s := range d.minDist {
		d.minDist[s] = inf
		if d.match[s] {
			d.minDist[s] = 0
			queue = append(queue, int32(s))
		}
	}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		for _, s := range rev[t] {
			if d.minDist[s] == inf {
				d.minDist[s] = d.minDist[t] + 1
				queue = append(queue, s)
			}
		}
	}
	// Longest path over live states, by depth-first search with cycle detection.
	d.maxDist = make([]int32, n)
	mark := make([]uint8, n) // 0 new, 1 on stack, 2 done
	var visit func(s int32) int32
	visit = func(s int32) int32 {
		switch mark[s] {
		case 1:
			return inf
		case 2:
			return d.maxDist[s]
		}
		mark[s] = 1
		best := int32(-1)
		if d.match[s] {
			best = 0
		}
		for _, t := range d.next[s] {
			if t < 0 || d.minDist[t] == inf {
				continue
			}
			if m := visit(t); m == inf {
				best = inf
			} else if best != inf && m+1 > best {
				best = m + 1
			}
		}
		mark[s] = 2
		d.maxDist[s] = best
		return best
	}
	for s := range d.next {
		if d.minDist[s] != inf {
			visit(int32(s))
		}
	}
}

// feasible reports whether from state s, after count characters, a match can still end
// the string within [minLen, maxLen] characters (maxLen < 0: no limit). The upper bound is
// exact; for the lower one only the longest path is checked.
func (d *dfa) feasible(s, count, minLen, maxLen int32) bool {
	if s < 0 || d.minDist[s] == math.MaxInt32 {
		return false
	}
	if maxLen >= 0 && count+d.minDist[s] > maxLen {
		return false
	}
	return d.maxDist[s] == math.MaxInt32 || count+d.maxDist[s] >= minLen
}

func (d *dfa) satisfiable(minLen, maxLen int32) bool { return d.feasible(0, 0, minLen, maxLen) }
