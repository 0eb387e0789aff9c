package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"
)

// BlockSize is the number of tokens in one KV-cache block, as in vLLM's
// default. Prefix matching works in whole blocks: a partly filled block is
// never shared.
const BlockSize = 16

// Request is one request as a client sends it. It is an input and is never
// modified by a simulation, so one slice of requests can be replayed under
// many configurations.
type Request struct {
	// ID is positive and unique within a run; After refers to it.
	ID int
	// Arrival is when the client sends the request, from the start of the run.
	Arrival time.Duration
	// After, when non-zero, is the ID of a request that must finish before
	// this one is sent (an agent's next turn needs the previous answer). The
	// request is then sent at max(Arrival, that request's finish + Think).
	After int
	Think time.Duration

	PromptTokens int // tokens in the prompt, at least 1
	OutputTokens int // tokens the answer will have, at least 1

	// BlockHashes identifies the content of the request's known token
	// sequence (the prompt, then the output when it is known) one full block
	// at a time, as a hash chain: BlockHashes[i] covers tokens [0, 16(i+1)),
	// so two requests share a block only if they share everything before it.
	// It may be shorter than the sequence (unknown content is never shared)
	// but never longer than its full blocks.
	BlockHashes []uint64
}

// Validate reports the first inconsistency in r.
func (r *Request) Validate() error {
	switch {
	case r.ID <= 0:
		return fmt.Errorf("request id %d: must be positive", r.ID)
	case r.PromptTokens < 1:
		return fmt.Errorf("request %d: prompt of %d tokens, need at least 1", r.ID, r.PromptTokens)
	case r.OutputTokens < 1:
		return fmt.Errorf("request %d: output of %d tokens, need at least 1", r.ID, r.OutputTokens)
	case r.Arrival < 0 || r.Think < 0:
		return fmt.Errorf("request %d: negative arrival or think time", r.ID)
	case r.After == r.ID:
		return fmt.Errorf("request %d: waits for itself", r.ID)
	case len(r.BlockHashes) > (r.PromptTokens+r.OutputTokens)/BlockSize:
		return fmt.Errorf("request %d: %d block hashes for %d tokens (at most %d full blocks)",
			r.ID, len(r.BlockHashes), r.PromptTokens+r.OutputTokens, (r.PromptTokens+r.OutputTokens)/BlockSize)
	}
	return nil
}

// promptBlocks is the number of full blocks in the prompt: the denominator
// of the prefix-cache score a router computes.
func (r *Request) promptBlocks() int { return r.PromptTokens / BlockSize }

// HashTokens returns the block hash chain of a token sequence: one hash per
// full block, each covering the block and every token before it.
func HashTokens(tokens []int32) []uint64 {
	n := len(tokens) / BlockSize
	out := make([]uint64, n)
	var prev uint64
	var buf [8 + 4*BlockSize]byte
	for i := range n {
		binary.LittleEndian.PutUint64(buf[:8], prev)
		for j, t := range tokens[i*BlockSize : (i+1)*BlockSize] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], uint32(t))
		}
		prev = fnv64(buf[:])
		out[i] = prev
	}
	return out
}

// ChainBlocks turns per-block content identifiers (any value that is equal
// exactly when two blocks hold the same 16 tokens) into a hash chain, so
// that a block matches only after an identical prefix.
func ChainBlocks(ids []uint64) []uint64 {
	out := make([]uint64, len(ids))
	var prev uint64
	var buf [16]byte
	for i, id := range ids {
		binary.LittleEndian.PutUint64(buf[:8], prev)
		binary.LittleEndian.PutUint64(buf[8:], id)
		prev = fnv64(buf[:])
		out[i] = prev
	}
	return out
}

func fnv64(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
