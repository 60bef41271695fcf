package state

var keyMetadataPort = []byte("metadata-port")

// MetadataPort is the port the task metadata endpoint last listened on
// when it picks its own (0: none yet). Containers keep the URI of that
// port in their environment across agent restarts.
func (d *DB) MetadataPort() (int, error) {
	var port uint64
	err := d.view(func(tx kvTx) error {
		var err error
		port, err = getU64(tx.Bucket(bucketMeta), keyMetadataPort)
		return err
	})
	return int(port), err
}

// SetMetadataPort records the task metadata endpoint's port.
func (d *DB) SetMetadataPort(port int) error {
	return d.update(func(tx kvTx) error { return tx.Bucket(bucketMeta).Put(keyMetadataPort, u64(uint64(port))) })
}
