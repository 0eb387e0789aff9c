package store

import "testing"

// The reference implementation's vectors (the SipHash paper, Appendix A,
// and its vectors.h): key 00 01 .. 0f, messages of 0 to 15 bytes 00 01 ...
func TestSipHashVectors(t *testing.T) {
	var key [16]byte
	for i := range key {
		key[i] = byte(i)
	}
	k := sipKeyOf(key[:])
	want := []uint64{
		0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
		0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
		0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
		0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
	}
	m := make([]byte, 0, len(want))
	for i, w := range want {
		if got := k.sum(m); got != w {
			t.Errorf("message of %d bytes: %#016x, want %#016x", i, got, w)
		}
		m = append(m, byte(i))
	}
}
