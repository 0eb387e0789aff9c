package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
)

func TestNewEpoch(t *testing.T) {
	now := time.Date(2026, 12, 1, 11, 15, 38, 0, time.FixedZone("CET", 3600))
	a, b := NewEpoch(now), NewEpoch(now)
	if a == b {
		t.Fatalf("two epochs of the same second are equal: %q", a)
	}
	if !strings.HasPrefix(a, "20261201T101538.000Z-") || len(a) != 37 {
		t.Errorf("epoch %q: want the UTC start to the millisecond and 16 hex digits", a)
	}
	if err := checkEpoch(a); err != nil {
		t.Errorf("NewEpoch's %q refused: %v", a, err)
	}
}

// A predictor moves only to a bundle that is current: never an older
// version of its lineage, another lineage only once it shows it began
// since the bundle in service was made, and nothing from the future.
func TestCheckSuccessor(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hour := time.Hour
	// A: a lineage begun at 10:00, its v57 made at 11:00. B: begun at 11:30
	// (A's bundles wiped). O: begun at 09:00 (the lineage A replaced).
	A, B, O := NewEpoch(now.Add(-2*hour)), NewEpoch(now.Add(-hour/2)), NewEpoch(now.Add(-3*hour))
	bundle := func(epoch string, v uint64, made time.Time) *model.Bundle {
		return &model.Bundle{Epoch: epoch, Version: v, CreatedAt: made, Checksum: fmt.Sprintf("%s/%d/%d", epoch, v, made.Unix())}
	}
	a57 := bundle(A, 57, now.Add(-hour))
	legacy := bundle("", 57, now.Add(-hour))
	for _, tt := range []struct {
		name      string
		next, cur *model.Bundle
		want      error
	}{
		{"first bundle", bundle(A, 1, now.Add(-2*hour)), nil, nil},
		{"newer, same epoch", bundle(A, 58, now), a57, nil},
		{"same bundle", a57, a57, ErrSameBundle},
		{"older, same epoch", bundle(A, 56, now.Add(-90*time.Minute)), a57, ErrStale},
		{"same version, other content", bundle(A, 57, now.Add(-hour+time.Second)), a57, nil},
		{"a new lineage at v1", bundle(B, 1, now), a57, nil},
		{"a new lineage begun just after its predecessor's bundle was made", bundle(NewEpoch(a57.CreatedAt.Add(time.Millisecond)), 1, now), a57, nil},
		{"a lineage begun just before the bundle in service was made", bundle(NewEpoch(a57.CreatedAt.Add(-time.Millisecond)), 1, now), a57, ErrOlderLineage},
		{"a lineage of a release that kept seconds, begun in that second", bundle("20261201T110000Z-0123456789abcdef", 1, now), bundle(A, 58, a57.CreatedAt.Add(400*time.Millisecond)), nil},
		{"a replay of the lineage A replaced, at a higher version", bundle(O, 900, now.Add(-150*time.Minute)), a57, ErrOlderLineage},
		{"a replay of A while B serves", a57, bundle(B, 3, now), ErrOlderLineage},
		{"another lineage whose epoch says nothing of its start", bundle("B", 1, now.Add(-hour/2)), a57, nil},
		{"another lineage whose epoch says nothing, made before", bundle("B", 1, now.Add(-2*hour)), a57, ErrOlderLineage},
		{"older, no epochs", bundle("", 56, now.Add(-2*hour)), legacy, ErrStale},
		{"newer, no epochs", bundle("", 58, now), legacy, nil},
		{"an upgraded trainer stamps its first epoch", bundle(B, 58, now), legacy, nil},
		{"a wiped trainer of a release without epochs", bundle("", 1, now), a57, nil},
		{"a replay of a bundle without an epoch", bundle("", 40, now.Add(-5*hour)), a57, ErrOlderLineage},
		{"made in the future", bundle(A, 58, now.Add(MaxClockSkew+time.Second)), a57, ErrFromTheFuture},
		{"a lineage begun in the future", bundle(NewEpoch(now.Add(hour)), 1, now), a57, ErrFromTheFuture},
		{"a first bundle from the future", bundle(NewEpoch(now.Add(hour)), 1, now), nil, ErrFromTheFuture},
		{"within the clock skew", bundle(NewEpoch(now.Add(MaxClockSkew/2)), 1, now.Add(MaxClockSkew/2)), a57, nil},
	} {
		if got := CheckSuccessor(tt.next, tt.cur, now); !errors.Is(got, tt.want) || (tt.want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if err := CheckSuccessor(bundle(NewEpoch(now.Add(hour)), 1, now.Add(hour)), a57, time.Time{}); err != nil {
		t.Errorf("judged by no clock, a bundle from the future: %v, want it taken", err)
	}
	if start, precision, ok := EpochStart(A); !ok || !start.Equal(now.Add(-2*hour)) || precision != time.Millisecond {
		t.Errorf("EpochStart(%q) = %v, %v, %v", A, start, precision, ok)
	}
	if start, precision, ok := EpochStart("20261201T110000Z-00"); !ok || start.Hour() != 11 || precision != time.Second {
		t.Errorf("EpochStart of a second-precision epoch = %v, %v, %v", start, precision, ok)
	}
	for _, e := range []string{"", "A", "yesterday-0123", "20261301T000000Z-00"} {
		if _, _, ok := EpochStart(e); ok {
			t.Errorf("EpochStart(%q) read a start", e)
		}
	}
}

// A bundle without an epoch is byte for byte what a trainer before epochs
// wrote, and it loads; one with an epoch carries it in the envelope and
// the payload, and the two must agree.
func TestBundleEpochOnTheWire(t *testing.T) {
	legacy := modeltest.Bundle(t)
	data, err := Encode(legacy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("epoch")) {
		t.Fatalf("a bundle without an epoch names one: %.200s", data)
	}
	if got, err := Decode(data, nil); err != nil || got.Epoch != "" || got.Version != 7 {
		t.Fatalf("bundle without an epoch: %+v, %v", got, err)
	}

	b := modeltest.Bundle(t)
	b.Epoch = NewEpoch(time.Now())
	data, err = Encode(b, []byte("shared-secret-0123456789"))
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
		b := modeltest.Bundle(t)
		b.Epoch = bad
		data, err := Encode(b, nil)
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
		if _, err := Write(dir, v, fmt.Appendf(nil, "bundle %d", v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveExcept(dir, 1); err != nil {
		t.Fatal(err)
	}
	if vs, _ := Versions(dir); len(vs) != 1 || vs[0] != 1 {
		t.Errorf("versions left %v, want [1]", vs)
	}
	if err := RemoveExcept(t.TempDir()+"/missing", 1); err != nil {
		t.Errorf("missing directory: %v", err)
	}
}
