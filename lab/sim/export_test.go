package sim

// Steps is the number of engine steps the fleet's pods have run: what the
// external benchmarks report per second.
func (f *PDFleet) Steps() int {
	n := 0
	for _, p := range []*pool{&f.prefill, &f.decode} {
		for _, e := range p.engines {
			n += e.Stats().Steps
		}
	}
	return n
}
