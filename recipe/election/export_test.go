package election

import "time"

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
