//go:build !unix

package service

// descriptorLimit is a generous bound where the system states none.
func descriptorLimit() int { return 1 << 16 }
