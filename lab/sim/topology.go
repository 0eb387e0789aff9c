package sim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/headroomhq/headroom/features"
)

// linkKey names the shared link a transfer between a and b occupies: the
// node's NVLink fabric for one node, and otherwise the path between the two
// nodes, racks, zones or regions at the level where they part. Transfers on
// the same key share its bandwidth; transfers on different keys do not
// interfere (a simplification: in a real cluster two transfers out of one
// node to two other nodes also share that node's NIC).
func linkKey(a, b features.Topology) string {
	pair := func(level, x, y string) string {
		if y < x {
			x, y = y, x
		}
		return level + ":" + x + "|" + y
	}
	switch features.ClassOf(a, b) {
	case features.CrossRegion:
		return pair("region", a.Region, b.Region)
	case features.CrossZone:
		return pair("zone", a.Region+"/"+a.Zone, b.Region+"/"+b.Zone)
	case features.SameZone:
		return pair("rack", a.Region+"/"+a.Zone+"/"+a.Rack, b.Region+"/"+b.Zone+"/"+b.Rack)
	case features.SameRack:
		base := a.Region + "/" + a.Zone + "/" + a.Rack + "/"
		return pair("node", base+a.Node, base+b.Node)
	}
	return "nvlink:" + a.Region + "/" + a.Zone + "/" + a.Rack + "/" + a.Node
}

// Link is one class of link: a fixed setup latency per transfer, then the
// bytes at the bandwidth, shared equally by the transfers on it at once.
type Link struct {
	BytesPerSec float64       `json:"bytes_per_sec"`
	Latency     time.Duration `json:"latency"`
}

// Links gives each link class its Link.
type Links [features.NumLinkClasses]Link

// DefaultLinks are effective KV-transfer rates for a GPU cluster of H200
// hosts; each is about 80% of the line rate, what NIXL-style transfers of
// many paged blocks reach in practice:
//   - same node: NVLink 4 moves 450 GB/s each way: 360 GB/s, 5 µs;
//   - same rack: one 400 Gb/s RDMA NIC (50 GB/s): 40 GB/s, 10 µs;
//   - same zone, across racks: a 4:1 oversubscribed spine leaves about
//     100 Gb/s per node pair under load: 10 GB/s, 50 µs;
//   - cross zone: data-centre interconnect, about 25 Gb/s per flow: 3 GB/s,
//     0.5 ms (zones are kilometres apart);
//   - cross region: about 4 Gb/s per flow: 0.5 GB/s, 20 ms round trips.
//
// These are assumptions a reader can change, not measurements; what matters
// for routing is that they differ by orders of magnitude, as in real
// clusters.
func DefaultLinks() Links {
	return Links{
		features.SameNode:    {BytesPerSec: 360e9, Latency: 5 * time.Microsecond},
		features.SameRack:    {BytesPerSec: 40e9, Latency: 10 * time.Microsecond},
		features.SameZone:    {BytesPerSec: 10e9, Latency: 50 * time.Microsecond},
		features.CrossZone:   {BytesPerSec: 3e9, Latency: 500 * time.Microsecond},
		features.CrossRegion: {BytesPerSec: 0.5e9, Latency: 20 * time.Millisecond},
	}
}

// LayoutLinks are the links of a PlacePods layout: DefaultLinks, but for
// equal-links, whose every class is DefaultLinks' same-node link. That is
// the cluster of llm-d-router #2315's evaluation, where same-node and
// cross-node transfers performed alike: a router that learns the links must
// then route as if there were no topology, where one that adds constants
// for it still favours the nearer pods.
func LayoutLinks(layout string) Links {
	links := DefaultLinks()
	if layout == "equal-links" {
		for c := range links {
			links[c] = links[features.SameNode]
		}
	}
	return links
}

// Validate reports the first link that cannot carry data.
func (l Links) Validate() error {
	for c, k := range l {
		if !(k.BytesPerSec > 0) || k.Latency < 0 {
			return fmt.Errorf("link %s: bandwidth %g B/s and latency %v, need a positive bandwidth and no negative latency",
				features.LinkClass(c), k.BytesPerSec, k.Latency)
		}
	}
	return nil
}

// Transfer is one KV-cache transfer from a prefill pod to a decode pod.
type Transfer struct {
	Class features.LinkClass
	Bytes float64
	Start time.Duration
	End   time.Duration // zero until it completes
	// Concurrent is how many transfers were on its link when it joined,
	// itself included: the contention a sidecar could report.
	Concurrent int
	// MeanConcurrent is the time-weighted mean number of transfers on its
	// link while its bytes moved, itself included: what its bandwidth share
	// really was (bytes / (End − Start − latency) = bandwidth / MeanConcurrent).
	MeanConcurrent float64

	link      *linkState
	crowd     float64       // ∫ transfers on the link dt, in seconds, since it joined
	joinAt    time.Duration // Start + the link's latency
	joined    bool
	remaining float64 // bytes
	owner     *PDOutcome
}

type linkState struct {
	bytesPerSec float64
	active      []*Transfer
	last        time.Duration // remaining bytes of active transfers are as of this time
}

// network carries transfers over shared links with processor sharing: the
// transfers on one link each get an equal share of its bandwidth, and the
// shares change as transfers join and leave.
type network struct {
	links   Links
	byKey   map[string]*linkState
	pending []*Transfer // started, still in their setup latency, by joinAt then start order
	active  int
}

func newNetwork(links Links) *network {
	return &network{links: links, byKey: make(map[string]*linkState)}
}

// start begins a transfer of bytes from a to b at time now.
func (n *network) start(now time.Duration, a, b features.Topology, bytes float64, owner *PDOutcome) *Transfer {
	class := features.ClassOf(a, b)
	key := linkKey(a, b)
	ls := n.byKey[key]
	if ls == nil {
		ls = &linkState{bytesPerSec: n.links[class].BytesPerSec, last: now}
		n.byKey[key] = ls
	}
	t := &Transfer{Class: class, Bytes: bytes, Start: now, link: ls, remaining: bytes, owner: owner,
		joinAt: now + n.links[class].Latency}
	i := len(n.pending)
	for i > 0 && n.pending[i-1].joinAt > t.joinAt {
		i--
	}
	n.pending = append(n.pending, nil)
	copy(n.pending[i+1:], n.pending[i:])
	n.pending[i] = t
	n.active++
	return t
}

// settle brings a link's remaining bytes up to time now.
func (ls *linkState) settle(now time.Duration) {
	if dt := now - ls.last; dt > 0 && len(ls.active) > 0 {
		share := ls.bytesPerSec / float64(len(ls.active)) * dt.Seconds()
		crowd := float64(len(ls.active)) * dt.Seconds()
		for _, t := range ls.active {
			t.remaining -= share
			t.crowd += crowd
		}
	}
	ls.last = now
}

// finishTime is when the link's first transfer completes if nothing joins.
func (ls *linkState) finishTime() (time.Duration, *Transfer) {
	var first *Transfer
	for _, t := range ls.active {
		if first == nil || t.remaining < first.remaining {
			first = t
		}
	}
	if first == nil {
		return 0, nil
	}
	rate := ls.bytesPerSec / float64(len(ls.active))
	d := time.Duration(max(0, first.remaining) / rate * 1e9)
	if float64(d) < max(0, first.remaining)/rate*1e9 {
		d++ // round up, so that at the event the bytes are gone
	}
	return ls.last + d, first
}

// next is the time of the network's next event: a transfer joining its
// link or finishing.
func (n *network) next() (time.Duration, bool) {
	var at time.Duration
	ok := false
	if len(n.pending) > 0 {
		at, ok = n.pending[0].joinAt, true
	}
	for _, ls := range n.byKey {
		if t, first := ls.finishTime(); first != nil && (!ok || t < at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// advance processes every network event at time now (which must be next's
// answer) and returns the transfers that completed, in a deterministic
// order (by start, then by owner request).
func (n *network) advance(now time.Duration) []*Transfer {
	var done []*Transfer
	for _, ls := range n.byKey {
		if t, first := ls.finishTime(); first != nil && t <= now {
			ls.settle(now)
			kept := ls.active[:0]
			for _, x := range ls.active {
				// Transfers that finish within a byte of the first are done
				// together: float rounding must not leave a nanosecond event.
				if x == first || x.remaining <= 1 {
					x.finish(now)
					done = append(done, x)
					continue
				}
				kept = append(kept, x)
			}
			clear(ls.active[len(kept):])
			ls.active = kept
		}
	}
	for len(n.pending) > 0 && n.pending[0].joinAt <= now {
		t := n.pending[0]
		n.pending = n.pending[1:]
		t.link.settle(now)
		t.link.active = append(t.link.active, t)
		t.joined = true
		t.Concurrent = len(t.link.active)
		if t.remaining <= 0 { // an empty transfer pays only the latency
			t.link.active = t.link.active[:len(t.link.active)-1]
			t.finish(now)
			done = append(done, t)
		}
	}
	n.active -= len(done)
	sortTransfers(done)
	return done
}

func (t *Transfer) finish(now time.Duration) {
	t.End = now
	t.MeanConcurrent = float64(t.Concurrent)
	if moving := (now - t.joinAt).Seconds(); moving > 0 {
		t.MeanConcurrent = t.crowd / moving
	}
}

func sortTransfers(ts []*Transfer) {
	slices.SortFunc(ts, func(a, b *Transfer) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.owner.Request.ID, b.owner.Request.ID)
	})
}
