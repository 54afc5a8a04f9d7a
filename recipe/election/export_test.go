package election

import (
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
)

// DesignationForTest is the designation record's data.
type DesignationForTest = designationData

// DecideForTest exposes decide to the external test package.
func DecideForTest(rec *DesignationForTest, age, ttl time.Duration, self string, live map[string]bool) (requeue, drop bool) {
	var d *designation
	if rec != nil {
		d = &designation{designationData: *rec}
	}
	r := decide(d, age, ttl, self, live)
	return r.requeue, r.drop
}

// AcceptCandidateForTest exposes acceptCandidate (name, data, ephemeral
// owner) to the external test package: the reason, "" when it counts.
func AcceptCandidateForTest(name string, data []byte, owner int64) (Candidate, string) {
	sn, err := zkr.ParseSeqNode(candidatePrefix, name)
	if err != nil {
		return Candidate{}, err.Error()
	}
	return acceptCandidate(sn, data, &zk.Stat{EphemeralOwner: owner, Czxid: 5}, true)
}
