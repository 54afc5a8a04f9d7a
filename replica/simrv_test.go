package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// newRVDrillSim is the simulation with the operator at work on room
// versions: every member starts on a binary of room versions 1..2 with an
// upgrade asked for, and one step in eight is the operator's (a target
// set to the version the room is not at, a binary swapped, a move
// landing), so the room goes up to 2 and back down to 1 (lowering) again
// and again, and the downgrade procedure (ReadRoomVersion's Complete,
// then an older binary) runs under the main run's faults.
func newRVDrillSim(fail func(string), seed uint64, bugs simBugs) *sim {
	s := newSim(fail, seed, bugs)
	s.rvDrill, s.rvTarget = true, 2
	for _, m := range s.ms {
		m.hi = 2
		m.c.rv = rvIdentityFor(m.hi, simRoom)
	}
	return s
}

// simDrillSeeds is how many seeds TestSimulationRoomVersionDrill runs.
const simDrillSeeds = 300

// TestSimulationRoomVersionDrill runs the invariants of sim_test.go on
// the room-version drill: roomversion.go's decisions (the facts built
// from the member data, the move decided and decided again when it
// lands, ReadRoomVersion's Blocked and Complete) with binaries upgraded
// and downgraded under faults. Rerun one seed with
//
//	go test ./replica -run TestSimulationRoomVersionDrill -sim.seed=N -v
func TestSimulationRoomVersionDrill(t *testing.T) {
	first, last := uint64(1), uint64(simDrillSeeds)
	if *simSeed != 0 {
		first, last = *simSeed, *simSeed
	}
	var moves, downgrades, refused int
	for seed := first; seed <= last; seed++ {
		s := newRVDrillSim(func(msg string) { t.Fatal(msg) }, seed, simBugs{})
		s.run(*simSteps)
		moves += s.rvMoves
		downgrades += s.rvDowngrades
		refused += s.rvRefused
	}
	t.Logf("%d seeds: %d room-version moves, %d binaries downgraded on a complete downgrade, %d members refused a room beyond them",
		last-first+1, moves, downgrades, refused)
	if *simSeed == 0 {
		require.Positive(t, moves)
		require.Positive(t, downgrades)
	}
}
