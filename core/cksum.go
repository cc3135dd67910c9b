package core

// Cksum returns the POSIX cksum(1) CRC of data: CRC-32 with polynomial
// 0x04C11DB7, most significant bit first, over the data followed by its length
// in as few little-endian bytes as it needs, complemented. The seed skill takes
// `echo -n "$AGENT_ID" | cksum` as an agent's default priority, so mixed swarms
// only agree on the tie-break if we compute exactly the same number.
// hash/crc32 only offers the bit-reversed form, hence this small loop.
func Cksum(data []byte) uint32 {
	var crc uint32
	for _, b := range data {
		crc = cksumByte(crc, b)
	}
	for n := len(data); n > 0; n >>= 8 {
		crc = cksumByte(crc, byte(n))
	}
	return ^crc
}

func cksumByte(crc uint32, b byte) uint32 {
	crc ^= uint32(b) << 24
	for range 8 {
		if crc&0x80000000 != 0 {
			crc = crc<<1 ^ 0x04C11DB7
		} else {
			crc <<= 1
		}
	}
	return crc
}
