package model

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNewEpoch(t *testing.T) {
	now := time.Date(2026, 12, 1, 11, 15, 38, 0, time.FixedZone("CET", 3600))
	a, b := NewEpoch(now), NewEpoch(now)
	if a == b {
		t.Fatalf("two epochs of the same second are equal: %q", a)
	}
	if !strings.HasPrefix(a, "20261201T101538Z-") || len(a) != 33 {
		t.Errorf("epoch %q: want the UTC start and 16 hex digits", a)
	}
	if err := checkEpoch(a); err != nil {
		t.Errorf("NewEpoch's %q refused: %v", a, err)
	}
}

func TestSupersedes(t *testing.T) {
	bundle := func(epoch string, v uint64, sum string) *Bundle {
		return &Bundle{Epoch: epoch, Version: v, Checksum: sum}
	}
	for _, tt := range []struct {
		name      string
		next, cur *Bundle
		want      bool
	}{
		{"first bundle", bundle("A", 1, "a1"), nil, true},
		{"newer, same epoch", bundle("A", 58, "a58"), bundle("A", 57, "a57"), true},
		{"same bundle", bundle("A", 57, "a57"), bundle("A", 57, "a57"), false},
		{"older, same epoch", bundle("A", 56, "a56"), bundle("A", 57, "a57"), false},
		{"same version, other content", bundle("A", 57, "a57b"), bundle("A", 57, "a57"), true},
		{"new lineage at v1", bundle("B", 1, "b1"), bundle("A", 57, "a57"), true},
		{"new lineage, higher", bundle("B", 60, "b60"), bundle("A", 57, "a57"), true},
		{"older, no epochs", bundle("", 56, "x56"), bundle("", 57, "x57"), false},
		{"newer, no epochs", bundle("", 58, "x58"), bundle("", 57, "x57"), true},
		{"upgraded trainer stamps an epoch", bundle("A", 58, "a58"), bundle("", 57, "x57"), true},
		{"wiped trainer of an older release", bundle("", 1, "x1"), bundle("A", 57, "a57"), true},
	} {
		if got := Supersedes(tt.next, tt.cur); got != tt.want {
			t.Errorf("%s: Supersedes = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A bundle without an epoch is byte for byte what a trainer before epochs
// wrote, and it loads; one with an epoch carries it in the envelope and
// the payload, and the two must agree.
func TestBundleEpochOnTheWire(t *testing.T) {
	legacy := testBundle(t)
	data, err := legacy.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("epoch")) {
		t.Fatalf("a bundle without an epoch names one: %.200s", data)
	}
	if got, err := Decode(data, nil); err != nil || got.Epoch != "" || got.Version != 7 {
		t.Fatalf("bundle without an epoch: %+v, %v", got, err)
	}

	b := testBundle(t)
	b.Epoch = NewEpoch(time.Now())
	data, err = b.Encode([]byte("shared-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(data, []byte("shared-secret-0123456789")); err != nil || got.Epoch != b.Epoch {
		t.Fatalf("bundle with epoch %q: %+v, %v", b.Epoch, got, err)
	}
	if !bytes.Contains(data, []byte(`"epoch":"`+b.Epoch+`","sha256"`)) {
		t.Errorf("the envelope does not carry the epoch: %.200s", data)
	}

	// The envelope is not covered by the checksum: an edit there must
	// not change the lineage a predictor files the bundle under.
	forged := bytes.Replace(data, []byte(`"epoch":"`+b.Epoch+`","sha256"`), []byte(`"epoch":"other","sha256"`), 1)
	if _, err := Decode(forged, []byte("shared-secret-0123456789")); err == nil || !strings.Contains(err.Error(), "envelope says epoch") {
		t.Errorf("envelope and payload epochs differ: %v, want refused", err)
	}
	for _, bad := range []string{strings.Repeat("e", 65), "a b", `a"b`, "a\nb", "é"} {
		b := testBundle(t)
		b.Epoch = bad
		data, err := b.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(data, nil); err == nil {
			t.Errorf("epoch %q accepted", bad)
		}
	}
}

func TestRemoveBundlesExcept(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []uint64{56, 57, 1} {
		if _, err := WriteBundle(dir, v, fmt.Appendf(nil, "bundle %d", v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveBundlesExcept(dir, 1); err != nil {
		t.Fatal(err)
	}
	if vs, _ := BundleVersions(dir); len(vs) != 1 || vs[0] != 1 {
		t.Errorf("versions left %v, want [1]", vs)
	}
	if err := RemoveBundlesExcept(t.TempDir()+"/missing", 1); err != nil {
		t.Errorf("missing directory: %v", err)
	}
}
