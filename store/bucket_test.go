package store

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

func TestDimLevel(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		dim  Dim
		row  features.Row
		want int
	}{
		{DimKV10, features.Row{KVCachePercentage: 0}, 0},
		{DimKV10, features.Row{KVCachePercentage: 0.0999}, 0},
		{DimKV10, features.Row{KVCachePercentage: 0.1}, 1},
		{DimKV10, features.Row{KVCachePercentage: 0.35}, 3},
		{DimKV10, features.Row{KVCachePercentage: 0.9}, 9},
		{DimKV10, features.Row{KVCachePercentage: 1}, 9},
		{DimKV10, features.Row{KVCachePercentage: 1.7}, 9},
		{DimKV10, features.Row{KVCachePercentage: -0.2}, 0},
		{DimKV10, features.Row{KVCachePercentage: nan}, 0},
		{DimPrefix4, features.Row{PrefixCacheScore: 0}, 0},
		{DimPrefix4, features.Row{PrefixCacheScore: 0.2499}, 0},
		{DimPrefix4, features.Row{PrefixCacheScore: 0.25}, 1},
		{DimPrefix4, features.Row{PrefixCacheScore: 0.5}, 2},
		{DimPrefix4, features.Row{PrefixCacheScore: 0.75}, 3},
		{DimPrefix4, features.Row{PrefixCacheScore: 1}, 3},
		{DimPrefix4, features.Row{PrefixCacheScore: nan}, 0},
		{DimQueue5, features.Row{NumRequestWaiting: -1}, 0},
		{DimQueue5, features.Row{NumRequestWaiting: 0}, 0},
		{DimQueue5, features.Row{NumRequestWaiting: 1}, 1},
		{DimQueue5, features.Row{NumRequestWaiting: 2}, 1},
		{DimQueue5, features.Row{NumRequestWaiting: 3}, 2},
		{DimQueue5, features.Row{NumRequestWaiting: 5}, 2},
		{DimQueue5, features.Row{NumRequestWaiting: 6}, 3},
		{DimQueue5, features.Row{NumRequestWaiting: 10}, 3},
		{DimQueue5, features.Row{NumRequestWaiting: 11}, 4},
		{DimQueue5, features.Row{NumRequestWaiting: 1000}, 4},
		{DimPrompt, features.Row{InputTokenLength: -5}, 0},
		{DimPrompt, features.Row{InputTokenLength: 127}, 0},
		{DimPrompt, features.Row{InputTokenLength: 128}, 1},
		{DimPrompt, features.Row{InputTokenLength: 511}, 2},
		{DimPrompt, features.Row{InputTokenLength: 512}, 3},
		{DimPrompt, features.Row{InputTokenLength: 2048}, 5},
		{DimPrompt, features.Row{InputTokenLength: 4095}, 5},
		{DimPrompt, features.Row{InputTokenLength: 4096}, 6},
		{DimPrompt, features.Row{InputTokenLength: 1 << 40}, 6},
		{DimPrompt9, features.Row{InputTokenLength: -5}, 0},
		{DimPrompt9, features.Row{InputTokenLength: 31}, 0},
		{DimPrompt9, features.Row{InputTokenLength: 32}, 1},
		{DimPrompt9, features.Row{InputTokenLength: 64}, 2},
		{DimPrompt9, features.Row{InputTokenLength: 127}, 2},
		{DimPrompt9, features.Row{InputTokenLength: 128}, 3},
		{DimPrompt9, features.Row{InputTokenLength: 4095}, 7},
		{DimPrompt9, features.Row{InputTokenLength: 4096}, 8},
		{DimPrompt9, features.Row{InputTokenLength: 1 << 40}, 8},
	}
	for _, tc := range tests {
		if got := tc.dim.Level(&tc.row); got != tc.want {
			t.Errorf("%s.Level(%+v) = %d, want %d", tc.dim.Name(), tc.row, got, tc.want)
		}
		if got := tc.dim.Level(&tc.row); got < 0 || got >= tc.dim.Levels() {
			t.Errorf("%s level %d outside [0, %d)", tc.dim.Name(), got, tc.dim.Levels())
		}
	}
}

// Decimal tenths must not fall a level short through rounding: 0.3 is
// level 3, not 2.
func TestKV10Tenths(t *testing.T) {
	for k := 0; k <= 10; k++ {
		r := features.Row{KVCachePercentage: float64(k) / 10}
		if got := DimKV10.Level(&r); got != min(k, 9) {
			t.Errorf("kv %v: level %d, want %d", r.KVCachePercentage, got, min(k, 9))
		}
	}
}

// The prefix dimension and the prefill_score_bucket feature are one
// definition.
func TestPrefix4MatchesFeature(t *testing.T) {
	schema := features.MustSchema("prefill_score_bucket")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		r := features.Row{PrefixCacheScore: rng.Float64()*1.2 - 0.1}
		if got, want := DimPrefix4.Level(&r), int(schema.Build(&r, nil)[0]); got != want {
			t.Fatalf("prefix %v: level %d, feature %d", r.PrefixCacheScore, got, want)
		}
	}
}

func TestSchemeKeys(t *testing.T) {
	tests := []struct {
		scheme  string
		row     features.Row
		key     string
		buckets int
	}{
		{"kv10,prefix4", features.Row{KVCachePercentage: 0.35, PrefixCacheScore: 0.6}, "kv_3_prefix_2", 40},
		{"kv10", features.Row{KVCachePercentage: 0.35, PrefixCacheScore: 0.6}, "kv_3", 10},
		{"prefix4,kv10", features.Row{KVCachePercentage: 0.99, PrefixCacheScore: 0}, "prefix_0_kv_9", 40},
		{"queue5,kv10,prefix4,prompt", features.Row{NumRequestWaiting: 7, KVCachePercentage: 0.05, PrefixCacheScore: 1, InputTokenLength: 300},
			"queue_3_kv_0_prefix_3_prompt_2", 5 * 10 * 4 * 7},
	}
	for _, tc := range tests {
		s, err := ParseScheme(tc.scheme)
		if err != nil {
			t.Fatalf("ParseScheme(%q): %v", tc.scheme, err)
		}
		if got := s.Key(&tc.row); got != tc.key {
			t.Errorf("%s: Key = %q, want %q", tc.scheme, got, tc.key)
		}
		if s.NumBuckets() != tc.buckets {
			t.Errorf("%s: %d buckets, want %d", tc.scheme, s.NumBuckets(), tc.buckets)
		}
		if s.String() != tc.scheme {
			t.Errorf("String() = %q, want %q", s.String(), tc.scheme)
		}
		keys := s.Keys()
		if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Errorf("%s: keys not strictly sorted: %v", tc.scheme, keys)
		}
		for i, k := range keys {
			if s.index(k) != i {
				t.Errorf("%s: index(%q) = %d, want %d", tc.scheme, k, s.index(k), i)
			}
		}
		if s.index("kv_3_prefix_9") != -1 || s.index("") != -1 {
			t.Errorf("%s: index of a foreign key is not -1", tc.scheme)
		}
	}
}

func TestParseScheme(t *testing.T) {
	good := map[string]string{
		"kv10,prefix4":          "kv10,prefix4",
		" KV10 , Prefix4 ":      "kv10,prefix4",
		"prompt":                "prompt",
		"prompt9,kv10":          "prompt9,kv10",
		"queue5,kv10,prefix4":   "queue5,kv10,prefix4",
		"prompt,queue5,prefix4": "prompt,queue5,prefix4",
	}
	for in, want := range good {
		s, err := ParseScheme(in)
		if err != nil {
			t.Errorf("ParseScheme(%q): %v", in, err)
			continue
		}
		if s.String() != want {
			t.Errorf("ParseScheme(%q).String() = %q, want %q", in, s.String(), want)
		}
	}
	bad := map[string]string{
		"":             "unknown dimension",
		"kv10,,prefix": "unknown dimension",
		"kv10,kv10":    "twice",
		"kv20":         "unknown dimension \"kv20\"",
	}
	for in, want := range bad {
		_, err := ParseScheme(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseScheme(%q) = %v, want error containing %q", in, err, want)
		}
	}
	if !(Scheme{}).IsZero() || DefaultScheme().IsZero() {
		t.Error("IsZero wrong")
	}
}
