package store

import (
	"crypto/rand"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// The store's secret decides each new sample's holdout side and keys its
// identity (dedup.go). Before it, the side was a public hash of the
// sample's content, so a client could compute which of its samples would
// be held out and send only those: one request of 1,000 copies of one such
// row evicted every real holdout row (issue 26). Now whoever does not know
// the secret can predict a sample's side no better than by its odds, the
// holdout fraction.
//
// The secret is secretLen random bytes in meta/secret, created once, with
// the store, or on the first open of a store written before it (by a
// release without it, which also ignores it). Samples stored before it
// keep their sides: nothing moves between training and holdout. Each
// identical copy of one of them is a duplicate, not stored again.
const secretLen = 32

var keySecret = []byte("secret")

// storeKeys are what the secret keys.
type storeKeys struct {
	holdout  [numStreams]sipKey // a record's point in [0, 1), per stream
	identity sipKey             // a record's identity
	public   bool               // points by publicPoint (Options.PublicSides)
}

func keysOf(secret []byte, public bool) storeKeys {
	base := sipKeyOf(secret[:16])
	k := storeKeys{public: public}
	for _, t := range streams {
		k.holdout[t] = base.derive("headroom/holdout/" + t.String())
	}
	k.identity = sipKeyOf(secret[16:32])
	return k
}

// ForReplay is o for a replay that must give the same figures on every
// run: a fixed secret, the same for every replay (a replay's store serves
// nobody), sides as every replay before the secrets chose them
// (PublicSides), and arrivals timed by the samples' own clock (ReplayTime).
func (o Options) ForReplay() Options {
	o.Secret = []byte("headroom replay: not a secret...")
	o.ReplayTime = true
	o.PublicSides = true
	return o
}

// newSecret returns the secret of a new store: opts' (Options.Secret, for
// a replay that must be repeatable), else secretLen random bytes.
func newSecret(opts Options) ([]byte, error) {
	if opts.Secret != nil {
		if len(opts.Secret) != secretLen {
			return nil, fmt.Errorf("store secret of %d bytes, want %d", len(opts.Secret), secretLen)
		}
		return append([]byte(nil), opts.Secret...), nil
	}
	secret := make([]byte, secretLen)
	rand.Read(secret) // never fails (crypto/rand since Go 1.24)
	return secret, nil
}

// readSecret returns meta/secret, nil when the store has none yet.
func readSecret(meta *bolt.Bucket) ([]byte, error) {
	v := meta.Get(keySecret)
	if v == nil {
		return nil, nil
	}
	if len(v) != secretLen {
		return nil, fmt.Errorf("meta/%s is %d bytes, want %d", keySecret, len(v), secretLen)
	}
	return append([]byte(nil), v...), nil
}

// holdoutPoint maps a record to [0, 1), deterministically for the store
// and unpredictably without its secret: SipHash-2-4 of the record's bytes
// under the stream's key, so that the streams' decisions for one sample
// are independent.
func (k *storeKeys) holdoutPoint(t features.Target, rec []byte) float64 {
	if k.public {
		return publicPoint(t, rec)
	}
	return float64(k.holdout[t].sum(rec)>>11) * 0x1p-53
}

// publicPoint maps a record to [0, 1) as stores did before their secrets:
// a salted FNV-64a of the record's bytes, finished by the SplitMix64 mixer
// because FNV's top bits are poorly mixed; the per-stream salt,
// "headroom/holdout/" and its name, makes the streams' decisions for one
// sample independent. Anyone can compute it: for replays only.
func publicPoint(t features.Target, rec []byte) float64 {
	h := uint64(fnvOffset)
	for _, c := range []byte("headroom/holdout/" + t.String()) {
		h ^= uint64(c)
		h *= fnvPrime
	}
	for _, c := range rec {
		h ^= uint64(c)
		h *= fnvPrime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) * 0x1p-53
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// identityOf is a record's identity: two records are one sample's exactly
// when their identities are equal, but for a chance of about 2⁻⁶⁴ a pair
// that nobody without the secret can aim at. A timestamp the service
// stamped is not part of it (dedup.go).
func (k *storeKeys) identityOf(rec []byte) uint64 {
	from, to, ok := stampedTime(rec)
	if !ok {
		return k.identity.sum(rec)
	}
	var buf [128]byte
	return k.identity.sum(append(append(buf[:0], rec[:from]...), rec[to:]...))
}
