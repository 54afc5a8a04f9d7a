package replica

import "context"

// publish is update and record in one call, for tests that own a
// membership (the loop splits them between its worker and itself).
func (m *membership) publish(ctx context.Context, d memberData) error {
	data, err := m.update(ctx, d)
	if err != nil {
		return err
	}
	m.record(data, d)
	return nil
}
