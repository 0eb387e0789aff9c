package sim

import (
	"math"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// place is a pod's placement, for tables.
func place(node, rack, zone, region string) features.Topology {
	return features.Topology{Node: node, Rack: rack, Zone: zone, Region: region}
}

func TestDefaultLinksAreOrdered(t *testing.T) {
	l := DefaultLinks()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	for c := features.SameNode; c < features.CrossRegion; c++ {
		if !(l[c].BytesPerSec > l[c+1].BytesPerSec) || l[c].Latency > l[c+1].Latency {
			t.Errorf("%v (%+v) is not faster than %v (%+v)", c, l[c], c+1, l[c+1])
		}
	}
	bad := l
	bad[features.SameZone].BytesPerSec = 0
	if bad.Validate() == nil {
		t.Error("a link without bandwidth validates")
	}
}

// Every layout's links are the defaults, but equal-links', whose every
// class is as fast as the same node's.
func TestLayoutLinks(t *testing.T) {
	def := DefaultLinks()
	for _, layout := range PDLayouts {
		l := LayoutLinks(layout)
		if err := l.Validate(); err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		for c := range l {
			want := def[c]
			if layout == "equal-links" {
				want = def[features.SameNode]
			}
			if l[c] != want {
				t.Errorf("%s: %v is %+v, want %+v", layout, features.LinkClass(c), l[c], want)
			}
		}
	}
}

// runNetwork starts each transfer at its time and runs the network until
// every transfer has ended.
func runNetwork(t *testing.T, links Links, starts []time.Duration, pairs [][2]features.Topology, bytes []float64) []*Transfer {
	t.Helper()
	n := newNetwork(links)
	ts := make([]*Transfer, len(starts))
	next := 0
	for steps := 0; ; steps++ {
		at, ok := n.next()
		if next < len(starts) && (!ok || starts[next] <= at) {
			ts[next] = n.start(starts[next], pairs[next][0], pairs[next][1], bytes[next],
				&PDOutcome{Request: &Request{ID: next + 1}})
			next++
			continue
		}
		if !ok {
			break
		}
		if steps > 1000 {
			t.Fatal("network does not stop")
		}
		n.advance(at)
	}
	for i, x := range ts {
		if x.End == 0 {
			t.Fatalf("transfer %d never ended", i)
		}
	}
	if n.active != 0 {
		t.Errorf("%d transfers still counted active", n.active)
	}
	return ts
}

func TestTransferAloneTakesBytesOverBandwidth(t *testing.T) {
	links := DefaultLinks()
	a := place("n1", "r1", "z1", "eu")
	for _, b := range []features.Topology{a, place("n2", "r1", "z1", "eu"), place("n2", "r2", "z1", "eu"), place("n2", "r2", "z2", "eu"), place("n2", "r2", "z2", "us")} {
		bytes := 1000.0 * DefaultKVBytesPerToken // a 1 000-token prompt of Qwen3-32B
		x := runNetwork(t, links, []time.Duration{time.Second}, [][2]features.Topology{{a, b}}, []float64{bytes})[0]
		l := links[features.ClassOf(a, b)]
		want := l.Latency + time.Duration(bytes/l.BytesPerSec*1e9)
		if d := x.End - x.Start; d < want || d > want+time.Nanosecond {
			t.Errorf("%v: %v, want latency + bytes/bandwidth = %v", x.Class, d, want)
		}
		if x.Concurrent != 1 || math.Abs(x.MeanConcurrent-1) > 1e-9 {
			t.Errorf("%v: concurrent %d, mean %g, want 1", x.Class, x.Concurrent, x.MeanConcurrent)
		}
	}
}

func TestConcurrentTransfersShareTheLink(t *testing.T) {
	links := DefaultLinks()
	a, b := place("n1", "r1", "z1", "eu"), place("n2", "r1", "z1", "eu")
	c, d := place("n3", "r1", "z1", "eu"), place("n4", "r1", "z1", "eu")
	l := links[features.SameRack]
	bytes := 500.0 * DefaultKVBytesPerToken
	alone := l.Latency + time.Duration(bytes/l.BytesPerSec*1e9)
	within := func(got, want time.Duration) bool { return math.Abs(float64(got-want)) <= 2 }

	// Two at once on one link: each takes the latency plus twice the time.
	ts := runNetwork(t, links, []time.Duration{0, 0}, [][2]features.Topology{{a, b}, {b, a}}, []float64{bytes, bytes})
	for i, x := range ts {
		if want := l.Latency + 2*(alone-l.Latency); !within(x.End-x.Start, want) {
			t.Errorf("shared transfer %d: %v, want %v", i, x.End-x.Start, want)
		}
	}
	if ts[1].Concurrent != 2 {
		t.Errorf("second transfer saw %d on the link, want 2", ts[1].Concurrent)
	}
	for i, x := range ts {
		if math.Abs(x.MeanConcurrent-2) > 1e-6 {
			t.Errorf("shared transfer %d: mean concurrency %g, want 2", i, x.MeanConcurrent)
		}
	}

	// On two different node pairs they do not interfere.
	ts = runNetwork(t, links, []time.Duration{0, 0}, [][2]features.Topology{{a, b}, {c, d}}, []float64{bytes, bytes})
	for i, x := range ts {
		if !within(x.End-x.Start, alone) {
			t.Errorf("transfer %d on its own link: %v, want %v", i, x.End-x.Start, alone)
		}
	}

	// One joining halfway through the first: the first has half its bytes
	// left, which now go at half speed, so it ends a whole "alone" transfer
	// time after the second started; the second, having moved half its bytes
	// by then, finishes the rest alone.
	half := (alone - l.Latency) / 2
	ts = runNetwork(t, links, []time.Duration{0, half}, [][2]features.Topology{{a, b}, {a, b}}, []float64{bytes, bytes})
	if want := l.Latency + half + 2*half; !within(ts[0].End-ts[0].Start, want) {
		t.Errorf("first of staggered: %v, want %v", ts[0].End-ts[0].Start, want)
	}
	if want := l.Latency + 2*half + half; !within(ts[1].End-ts[1].Start, want) {
		t.Errorf("second of staggered: %v, want %v", ts[1].End-ts[1].Start, want)
	}
	// Each spent a third of its byte time alone and two thirds shared.
	for i, x := range ts {
		if math.Abs(x.MeanConcurrent-5.0/3) > 1e-6 {
			t.Errorf("staggered transfer %d: mean concurrency %.6f, want 5/3", i, x.MeanConcurrent)
		}
	}
}

func TestEmptyTransferPaysOnlyLatency(t *testing.T) {
	a, b := place("n1", "r1", "z1", "eu"), place("n1", "r2", "z1", "eu")
	x := runNetwork(t, DefaultLinks(), []time.Duration{time.Millisecond}, [][2]features.Topology{{a, b}}, []float64{0})[0]
	if d := x.End - x.Start; d != DefaultLinks()[features.SameZone].Latency {
		t.Errorf("empty transfer took %v, want the latency", d)
	}
}
