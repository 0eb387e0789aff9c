package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/headroomhq/headroom/features"
)

// Dim is one stratification dimension: it maps a request row to a small
// level number, 0 ≤ level < Levels(). Levels are single digits, so bucket
// keys of one scheme sort bytewise in level order.
type Dim uint8

// The known dimensions. Their names (Dim.Name) are stored in files, so a
// name, once released, keeps its meaning forever.
const (
	DimKV10    Dim = iota + 1 // KV-cache use in 10% steps
	DimPrefix4                // prefix-cache score in 0.25 steps
	DimQueue5                 // waiting queue, the reference's five bands
	DimPrompt                 // prompt length in log2-spaced bands from 128 tokens
	DimPrompt9                // prompt length in log2-spaced bands from 32 tokens
)

type dimInfo struct {
	name   string // in scheme strings: "kv10"
	label  string // in bucket keys: "kv_3"
	levels int
	// bands are the exclusive upper bounds of a prompt dimension's levels
	// below the last; the last level holds everything longer.
	bands []int64
}

var dims = [...]dimInfo{
	DimKV10:    {name: "kv10", label: "kv", levels: 10},
	DimPrefix4: {name: "prefix4", label: "prefix", levels: 4},
	DimQueue5:  {name: "queue5", label: "queue", levels: 5},
	DimPrompt:  promptDim("prompt", 128, 256, 512, 1024, 2048, 4096),
	// Chat prompts are mostly short: with DimPrompt's first band holding
	// every prompt under 128 tokens, that bucket was the one that
	// overflowed and forgot its oldest samples (docs/ACCURACY.md).
	DimPrompt9: promptDim("prompt9", 32, 64, 128, 256, 512, 1024, 2048, 4096),
}

func promptDim(name string, bands ...int64) dimInfo {
	return dimInfo{name: name, label: "prompt", levels: len(bands) + 1, bands: bands}
}

func (d Dim) valid() bool { return d > 0 && int(d) < len(dims) }

// Name is the dimension's name in scheme strings, e.g. "kv10".
func (d Dim) Name() string {
	if !d.valid() {
		return "dim" + strconv.Itoa(int(d))
	}
	return dims[d].name
}

// Label is the dimension's prefix in bucket keys, e.g. "kv" in "kv_3".
func (d Dim) Label() string {
	if !d.valid() {
		return d.Name()
	}
	return dims[d].label
}

// Levels is the number of distinct levels.
func (d Dim) Levels() int {
	if !d.valid() {
		return 0
	}
	return dims[d].levels
}

// Level returns the row's level in this dimension. Out-of-range and NaN
// inputs fall into the nearest end level, so every row has a bucket.
func (d Dim) Level(r *features.Row) int {
	switch d {
	case DimKV10:
		return min(int(unit(r.KVCachePercentage)*10), 9)
	case DimPrefix4:
		// Same definition as the prefill_score_bucket feature.
		return min(int(unit(r.PrefixCacheScore)*4), 3)
	case DimQueue5:
		switch w := r.NumRequestWaiting; {
		case w <= 0:
			return 0
		case w <= 2:
			return 1
		case w <= 5:
			return 2
		case w <= 10:
			return 3
		}
		return 4
	case DimPrompt, DimPrompt9:
		bands := dims[d].bands
		for i, limit := range bands {
			if r.InputTokenLength < limit {
				return i
			}
		}
		return len(bands)
	}
	panic(fmt.Sprintf("store: dimension %d has no definition", d))
}

// unit clamps x to [0, 1], mapping NaN to 0.
func unit(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return min(x, 1)
}

// Scheme is an ordered list of dimensions; the bucket of a row is its tuple
// of levels. The zero Scheme means "the default" where a Scheme is an
// option. A Scheme is immutable and safe for concurrent use.
type Scheme struct {
	dims []Dim
	// keys[i] is the key of bucket index i, the mixed-radix number of the
	// levels with the first dimension most significant.
	keys []string
}

// DefaultSchemeName is the product brief's stratification, KV-cache use in
// 10% steps × prefix-cache score in 0.25 steps, with prompt length in
// log2-spaced bands from 32 tokens added: 360 buckets. With the brief's 40
// alone, a pool whose KV use stays under 10% and that has no prefix hits
// (the shared H200 trace is one) keeps a single bucket, 500 samples per
// target, and forgets long prompts whenever a run of short ones arrives.
// Measured with headroom eval (docs/ACCURACY.md): the same prequential
// accuracy, better random-split accuracy and calibration; the reference's
// queue-depth dimension changed nothing. BriefSchemeName remains available
// as a configuration, and "kv10,prefix4,prompt" (bands from 128 tokens,
// the default before) reads its old stores.
const DefaultSchemeName = "kv10,prefix4,prompt9"

// BriefSchemeName is the product brief's stratification: KV-cache use in
// 10% steps × prefix-cache score in 0.25 steps, 40 buckets.
const BriefSchemeName = "kv10,prefix4"

// DefaultScheme returns the scheme named DefaultSchemeName.
func DefaultScheme() Scheme { return MustParseScheme(DefaultSchemeName) }

// NewScheme builds a scheme from dimensions, each at most once.
func NewScheme(ds ...Dim) (Scheme, error) {
	if len(ds) == 0 {
		return Scheme{}, fmt.Errorf("bucket scheme: no dimensions")
	}
	n := 1
	for i, d := range ds {
		if !d.valid() {
			return Scheme{}, fmt.Errorf("bucket scheme: unknown dimension %d", d)
		}
		for _, prev := range ds[:i] {
			if prev == d {
				return Scheme{}, fmt.Errorf("bucket scheme: dimension %q appears twice", d.Name())
			}
		}
		n *= d.Levels()
	}
	s := Scheme{dims: append([]Dim(nil), ds...), keys: make([]string, n)}
	levels := make([]int, len(ds))
	var b strings.Builder
	for i := range s.keys {
		b.Reset()
		// Decompose i into levels, last dimension least significant.
		rest := i
		for j := len(ds) - 1; j >= 0; j-- {
			levels[j] = rest % ds[j].Levels()
			rest /= ds[j].Levels()
		}
		for j, d := range ds {
			if j > 0 {
				b.WriteByte('_')
			}
			b.WriteString(d.Label())
			b.WriteByte('_')
			b.WriteString(strconv.Itoa(levels[j]))
		}
		s.keys[i] = b.String()
	}
	return s, nil
}

// ParseScheme parses a comma-separated list of dimension names, e.g.
// "kv10,prefix4" or "queue5,kv10,prefix4,prompt". Order matters: it is the
// order of the parts of each bucket key.
func ParseScheme(text string) (Scheme, error) {
	var ds []Dim
	for part := range strings.SplitSeq(text, ",") {
		name := strings.ToLower(strings.TrimSpace(part))
		d := dimByName(name)
		if d == 0 {
			return Scheme{}, fmt.Errorf("bucket scheme %q: unknown dimension %q (known: %s)", text, name, knownDims())
		}
		ds = append(ds, d)
	}
	s, err := NewScheme(ds...)
	if err != nil {
		return Scheme{}, fmt.Errorf("bucket scheme %q: %w", text, err)
	}
	return s, nil
}

// MustParseScheme is ParseScheme for schemes fixed at compile time.
func MustParseScheme(text string) Scheme {
	s, err := ParseScheme(text)
	if err != nil {
		panic(err)
	}
	return s
}

func dimByName(name string) Dim {
	for d := Dim(1); d.valid(); d++ {
		if dims[d].name == name {
			return d
		}
	}
	return 0
}

func knownDims() string {
	var names []string
	for d := Dim(1); d.valid(); d++ {
		names = append(names, d.Name())
	}
	return strings.Join(names, ", ")
}

// String is the scheme's name, the inverse of ParseScheme; "" for the zero
// Scheme.
func (s Scheme) String() string {
	names := make([]string, len(s.dims))
	for i, d := range s.dims {
		names[i] = d.Name()
	}
	return strings.Join(names, ",")
}

// IsZero reports whether s is the zero Scheme.
func (s Scheme) IsZero() bool { return len(s.dims) == 0 }

// Dims returns a copy of the scheme's dimensions.
func (s Scheme) Dims() []Dim { return append([]Dim(nil), s.dims...) }

// NumBuckets is the number of buckets per target: the product of the
// dimensions' levels.
func (s Scheme) NumBuckets() int { return len(s.keys) }

// Keys returns every bucket key in index order, which is also bytewise order.
func (s Scheme) Keys() []string { return append([]string(nil), s.keys...) }

// Index returns the bucket index of a row, in [0, NumBuckets). Index and
// Key must not be called on the zero Scheme, which has no buckets.
func (s Scheme) Index(r *features.Row) int {
	i := 0
	for _, d := range s.dims {
		i = i*d.Levels() + d.Level(r)
	}
	return i
}

// Key returns the bucket key of a row, e.g. "kv_3_prefix_0". It does not
// allocate.
func (s Scheme) Key(r *features.Row) string { return s.keys[s.Index(r)] }

// index returns the bucket index of a key, or -1.
func (s Scheme) index(key string) int {
	// Keys are sorted bytewise (single-digit levels, fixed labels).
	lo, hi := 0, len(s.keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.keys[m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(s.keys) && s.keys[lo] == key {
		return lo
	}
	return -1
}

// The KV-transfer stream is stratified by what its model is a law of: the
// link class, and the amount moved, so that a burst of short transfers on
// one link cannot evict the long ones the bandwidth is learned from, and a
// busy same-rack link cannot evict the few cross-zone samples. The scheme
// is fixed (not an option): its keys are part of file format 2.
//
// transferTokenBands are the exclusive upper bounds of the kv_transfer_tokens
// levels below the last, log4-spaced from 256 tokens.
var transferTokenBands = []int64{256, 1024, 4096, 16384}

// transferScheme's buckets are link class × transfer size: 5 × 5 = 25, with
// keys "link_<class>_kvtok_<band>", e.g. "link_1_kvtok_2" for a same-rack
// transfer of 1,024 to 4,095 tokens.
var transferScheme = func() Scheme {
	nc := int(features.NumLinkClasses)
	nb := len(transferTokenBands) + 1
	s := Scheme{keys: make([]string, 0, nc*nb)}
	for c := range nc {
		for b := range nb {
			s.keys = append(s.keys, fmt.Sprintf("link_%d_kvtok_%d", c, b))
		}
	}
	return s
}()

// transferIndex is the transfer bucket of a sample: its Transfer's class
// and size band (a sample without a transfer, which the stream never
// holds, would be bucket 0).
func transferIndex(s *features.Sample) int {
	tr := s.Transfer
	if tr == nil {
		return 0
	}
	c := min(max(int(tr.Class()), 0), int(features.NumLinkClasses)-1)
	band := len(transferTokenBands)
	for i, limit := range transferTokenBands {
		if tr.Tokens < limit {
			band = i
			break
		}
	}
	return c*(len(transferTokenBands)+1) + band
}

// schemeOf is the scheme a stream's training buckets follow: the configured
// one for the per-pod targets, transferScheme for those of a pair (KV
// transfer, split TTFT), whose samples all carry a transfer.
func (db *DB) schemeOf(t features.Target) Scheme {
	if !t.PerPod() {
		return transferScheme
	}
	return db.opts.Scheme
}

// bucketIndex is the training bucket of a sample in stream t.
func (db *DB) bucketIndex(t features.Target, s *features.Sample) int {
	if !t.PerPod() {
		return transferIndex(s)
	}
	return db.opts.Scheme.Index(&s.Row)
}
