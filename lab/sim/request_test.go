package sim

import (
	"slices"
	"testing"
)

func TestHashTokensIsAPrefixChain(t *testing.T) {
	a := make([]int32, 5*BlockSize+3)
	for i := range a {
		a[i] = int32(i)
	}
	b := slices.Clone(a)
	b[2*BlockSize+1] = -1 // differ inside the third block
	ha, hb := HashTokens(a), HashTokens(b)
	if len(ha) != 5 {
		t.Fatalf("%d hashes for 5 full blocks and 3 tokens", len(ha))
	}
	if !slices.Equal(ha[:2], hb[:2]) {
		t.Error("equal leading blocks hash differently")
	}
	for i := 2; i < 5; i++ {
		if ha[i] == hb[i] {
			t.Errorf("block %d matches although an earlier block differs", i)
		}
	}
	if !slices.Equal(HashTokens(a[:3*BlockSize]), ha[:3]) {
		t.Error("the chain of a prefix is not a prefix of the chain")
	}
	// The same block content at another position is another block.
	c := slices.Concat(a[BlockSize:2*BlockSize], a[:BlockSize])
	if hc := HashTokens(c); hc[1] == ha[0] || hc[0] == ha[1] {
		t.Error("a block matches without its prefix")
	}
}

func TestChainBlocks(t *testing.T) {
	x := ChainBlocks([]uint64{1, 2, 3})
	y := ChainBlocks([]uint64{1, 2, 4})
	z := ChainBlocks([]uint64{2, 3})
	if !slices.Equal(x[:2], y[:2]) || x[2] == y[2] {
		t.Errorf("chains %v and %v: want equal first two, different third", x, y)
	}
	if z[0] == x[1] || z[1] == x[2] {
		t.Error("a shifted sequence matches")
	}
}

func TestRequestValidate(t *testing.T) {
	ok := Request{ID: 1, PromptTokens: 32, OutputTokens: 1, BlockHashes: make([]uint64, 2)}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	tests := []struct {
		name string
		edit func(*Request)
	}{
		{"zero id", func(r *Request) { r.ID = 0 }},
		{"empty prompt", func(r *Request) { r.PromptTokens = 0 }},
		{"no output", func(r *Request) { r.OutputTokens = 0 }},
		{"negative arrival", func(r *Request) { r.Arrival = -1 }},
		{"waits for itself", func(r *Request) { r.After = 1 }},
		{"more hashes than blocks", func(r *Request) { r.BlockHashes = make([]uint64, 3) }},
	}
	for _, tt := range tests {
		r := ok
		tt.edit(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}
