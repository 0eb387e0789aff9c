// Package priority runs background work (model fits, bundle loads) at a
// lower CPU priority than the requests a process serves, so that on a
// machine with few cores predictions come first. It is Linux-specific;
// elsewhere its functions run the work as it is.
package priority
