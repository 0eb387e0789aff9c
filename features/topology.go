package features

import (
	"fmt"
	"strings"
)

// Topology places a pod, in the spirit of Kubernetes' well-known labels
// (kubernetes.io/hostname, topology.kubernetes.io/zone and region, and the
// rack label most clusters add). Two pods are on the same rack only if they
// are in the same zone and region with the same rack name, and so on down:
// a name is only meaningful inside its parent.
type Topology struct {
	Node   string `json:"node"`
	Rack   string `json:"rack"`
	Zone   string `json:"zone"`
	Region string `json:"region"`
}

// LinkClass is how far apart two pods are, which decides the link their KV
// transfer takes. Classes are ordered from nearest to farthest: a farther
// class is never a faster link.
type LinkClass int

const (
	SameNode    LinkClass = iota // NVLink between GPUs of one host
	SameRack                     // RDMA through the top-of-rack switch
	SameZone                     // across racks, through the spine
	CrossZone                    // between zones of one region
	CrossRegion                  // between regions

	// NumLinkClasses is the number of link classes, for arrays indexed by
	// class.
	NumLinkClasses
)

var linkClassNames = [NumLinkClasses]string{"same-node", "same-rack", "same-zone", "cross-zone", "cross-region"}

func (c LinkClass) String() string {
	if c < 0 || c >= NumLinkClasses {
		return fmt.Sprintf("LinkClass(%d)", int(c))
	}
	return linkClassNames[c]
}

// ParseLinkClass is the inverse of LinkClass.String.
func ParseLinkClass(s string) (LinkClass, bool) {
	for c, name := range linkClassNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return LinkClass(c), true
		}
	}
	return 0, false
}

// ClassOf is the link class between two placements.
func ClassOf(a, b Topology) LinkClass {
	switch {
	case a.Region != b.Region:
		return CrossRegion
	case a.Zone != b.Zone:
		return CrossZone
	case a.Rack != b.Rack:
		return SameZone
	case a.Node != b.Node:
		return SameRack
	}
	return SameNode
}
