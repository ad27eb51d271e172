package vision

import (
	"bytes"
	"encoding/binary"
)

// exifOrientation finds the EXIF orientation tag (1 to 8; 1 when absent or unreadable) in a
// JPEG's APP1 segment, a PNG's eXIf chunk or a WebP's EXIF chunk.
func exifOrientation(format string, data []byte) int {
	var tiff []byte
	switch format {
	case "jpeg":
		tiff = jpegExif(data)
	case "png":
		tiff = chunk(data[min(8, len(data)):], "eXIf", binary.BigEndian, 4)
	case "webp":
		if len(data) > 12 {
			tiff = chunk(data[12:], "EXIF", binary.LittleEndian, 0)
			tiff = bytes.TrimPrefix(tiff, []byte("Exif\x00\x00"))
		}
	}
	return tiffOrientation(tiff)
}

// jpegExif walks a JPEG's marker segments up to the scan for APP1 "Exif\0\0".
func jpegExif(d []byte) []byte {
	if len(d) < 4 || d[0] != 0xFF || d[1] != 0xD8 {
		return nil
	}
	for i := 2; i+4 <= len(d); {
		if d[i] != 0xFF {
			return nil
		}
		marker := d[i+1]
		if marker == 0xFF { // fill byte
			i++
			continue
		}
		if marker == 0xDA || marker == 0xD9 { // start of scan, end of image
			return nil
		}
		n := int(binary.BigEndian.Uint16(d[i+2:]))
		if n < 2 || i+2+n > len(d) {
			return nil
		}
		body := d[i+4 : i+2+n]
		if marker == 0xE1 && bytes.HasPrefix(body, []byte("Exif\x00\x00")) {
			return body[6:]
		}
		i += 2 + n
	}
	return nil
}

// chunk finds a chunk by its four-character name in PNG-like (length, name, data, CRC) or
// RIFF-like (name, length, data, pad) layouts; crc is 4 for PNG's trailing CRC, 0 for RIFF.
func chunk(d []byte, name string, order binary.ByteOrder, crc int) []byte {
	riff := crc == 0
	for len(d) >= 8 {
		var n int
		var tag string
		if riff {
			tag, n = string(d[:4]), int(order.Uint32(d[4:8]))
		} else {
			n, tag = int(order.Uint32(d[:4])), string(d[4:8])
		}
		if n < 0 || 8+n > len(d) {
			return nil
		}
		if tag == name {
			return d[8 : 8+n]
		}
		step := 8 + n + crc
		if riff && n%2 == 1 {
			step++
		}
		if step > len(d) {
			return nil
		}
		d = d[step:]
	}
	return nil
}

// tiffOrientation reads tag 0x0112 of a TIFF structure's first IFD.
func tiffOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var order binary.ByteOrder
	switch string(t[:2]) {
	case "II":
		order = binary.LittleEndian
	case "MM":
		order = binary.BigEndian
	default:
		return 1
	}
	ifd := int(order.Uint32(t[4:8]))
	if ifd < 8 || ifd+2 > len(t) {
		return 1
	}
	n := int(order.Uint16(t[ifd:]))
	for e := range n {
		p := ifd + 2 + 12*e
		if p+12 > len(t) {
			return 1
		}
		if order.Uint16(t[p:]) == 0x0112 {
			v := int(order.Uint16(t[p+8:]))
			if v >= 1 && v <= 8 {
				return v
			}
			return 1
		}
	}
	return 1
}

// Orient turns an image upright for its EXIF orientation (2: mirrored; 3: rotated 180°;
// 4: flipped; 5: transposed; 6: rotated 90° clockwise to view; 7: transversed; 8: rotated
// 90° counter-clockwise to view), as PIL's ImageOps.exif_transpose does.
func Orient(m *RGB, orientation int) *RGB {
	if orientation <= 1 || orientation > 8 {
		return m
	}
	w, h := m.W, m.H
	ow, oh := w, h
	if orientation >= 5 {
		ow, oh = h, w
	}
	out := NewRGB(ow, oh)
	for y := range oh {
		for x := range ow {
			var sx, sy int
			switch orientation {
			case 2:
				sx, sy = w-1-x, y
			case 3:
				sx, sy = w-1-x, h-1-y
			case 4:
				sx, sy = x, h-1-y
			case 5:
				sx, sy = y, x
			case 6:
				sx, sy = y, h-1-x
			case 7:
				sx, sy = w-1-y, h-1-x
			case 8:
				sx, sy = w-1-y, x
			}
			copy(out.Pix[(y*ow+x)*3:(y*ow+x)*3+3], m.Pix[(sy*w+sx)*3:])
		}
	}
	return out
}
