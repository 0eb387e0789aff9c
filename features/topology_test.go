package features

import "testing"

func TestClassOf(t *testing.T) {
	base := Topology{Node: "n1", Rack: "r1", Zone: "z1", Region: "eu"}
	for _, tc := range []struct {
		name string
		b    Topology
		want LinkClass
	}{
		{"same node", base, SameNode},
		{"other node, same rack", Topology{Node: "n2", Rack: "r1", Zone: "z1", Region: "eu"}, SameRack},
		{"other rack", Topology{Node: "n2", Rack: "r2", Zone: "z1", Region: "eu"}, SameZone},
		// A rack name means nothing outside its zone: r1 in z2 is another rack.
		{"same rack name, other zone", Topology{Node: "n1", Rack: "r1", Zone: "z2", Region: "eu"}, CrossZone},
		{"other region", Topology{Node: "n1", Rack: "r1", Zone: "z1", Region: "us"}, CrossRegion},
	} {
		if got := ClassOf(base, tc.b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := ClassOf(tc.b, base); got != tc.want {
			t.Errorf("%s, reversed: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseLinkClassInvertsString(t *testing.T) {
	for c := SameNode; c < NumLinkClasses; c++ {
		if got, ok := ParseLinkClass(c.String()); !ok || got != c {
			t.Errorf("ParseLinkClass(%q) = %v, %v", c.String(), got, ok)
		}
	}
	if _, ok := ParseLinkClass("same-galaxy"); ok {
		t.Error("ParseLinkClass accepts an unknown class")
	}
}
