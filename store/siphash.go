package store

import (
	"encoding/binary"
	"math/bits"
)

// sipKey is a SipHash-2-4 key (Aumasson and Bernstein, "SipHash: a fast
// short-input PRF", 2012): a pseudorandom function of short inputs, so
// that whoever does not know the key can neither predict its output for an
// input nor find two inputs that collide. The store keys two with its
// secret (keys.go): the holdout side of a record, and its identity.
type sipKey struct{ k0, k1 uint64 }

// sum is SipHash-2-4 of m under k.
func (k sipKey) sum(m []byte) uint64 {
	v0 := k.k0 ^ 0x736f6d6570736575
	v1 := k.k1 ^ 0x646f72616e646f6d
	v2 := k.k0 ^ 0x6c7967656e657261
	v3 := k.k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(m)
	for ; len(m) >= 8; m = m[8:] {
		w := binary.LittleEndian.Uint64(m)
		v3 ^= w
		round()
		round()
		v0 ^= w
	}
	last := uint64(n) << 56
	for i, c := range m {
		last |= uint64(c) << (8 * i)
	}
	v3 ^= last
	round()
	round()
	v0 ^= last
	v2 ^= 0xff
	for range 4 {
		round()
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// sipKeyOf derives a key from a 16-byte secret.
func sipKeyOf(secret []byte) sipKey {
	return sipKey{binary.LittleEndian.Uint64(secret[:8]), binary.LittleEndian.Uint64(secret[8:16])}
}

// derive is the key k gives the purpose named by label: two outputs of k,
// so that keys for different purposes, and different streams, are
// independent.
func (k sipKey) derive(label string) sipKey {
	b := []byte(label + "/0")
	k0 := k.sum(b)
	b[len(b)-1] = '1'
	return sipKey{k0, k.sum(b)}
}
