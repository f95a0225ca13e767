"""Bit-exact binary encoding of TPB instructions (format version :data:`ENCODING_VERSION`).

Every instruction is a variable-length bit string, most significant bit first, padded with zero
bits to a whole number of bytes. It starts with a fixed header so a decoder can validate or skip it
without knowing the kind::

    opcode  OPCODE_BITS (8)   the kind's ``OPCODE`` (0x00 is never valid)
    length  LENGTH_BITS (24)  total bits of the instruction, header included, padding excluded

The body is the kind's fields in declaration order. Field widths come from the :class:`Machine`
(``docs/isa.md`` lists every field with its width formula):

* ``TB  = bits(num_tpbs - 1)``        a TPB index (``bits(x) = max(1, x.bit_length())``)
* ``MB  = num_tpbs``                  a TPB mask
* ``CB  = bits(su_counters - 1)``     an SU counter id
* ``VB  = su_counter_bits``           counter values (expected, per_block, amount)
* ``LB  = twu_max_levels.bit_length()``  a walk's level count
* ``FB  = twu_field_bits``            each of Initial/Step/Final, two's complement
* ``AB(space) = bits(size(space) - 1)``  a base byte address in DDR / SRAM / HBSM
* ``EB  = bits(ccb_dma_engines - 1)``  a DMA engine number
* ``SB  = cvu_max_stages.bit_length()``  a CVU stage count

Integers without a hardware bound (sizes, params, blocks, list lengths) are *varints*: ``uv`` is a
7-bit length ``L`` followed by the value in ``L`` bits (minimal ``L``; values < 2**127); ``sv`` is
``uv`` of the zig-zag mapping (``x >= 0 -> 2x``, ``x < 0 -> -2x - 1``). Float immediates are IEEE-754
binary64 bit patterns (exact round trip, ``-0.0`` kept). Rarely used fields carry a presence bit.

:func:`decode_instructions` validates everything: the header, enum values, list lengths against the
bits left, the length field against the bits the fields used, zero padding, and finally
``inst.check(machine)``. Any failure raises :class:`DecodeError` whose ``offset`` is a *bit* offset
into the decoded data (the message also gives the byte). It never raises anything else on bad input.
"""

from __future__ import annotations

from .encoding_fields import (ENCODING_VERSION, HEADER_BITS, LENGTH_BITS, OPCODE_BITS, DecodeError,
                              EncodeError, layout)
from .encoding_read import decode_instruction_at, decode_instructions
from .encoding_write import encode_instruction, encode_instructions, instruction_bits
from .machine import Machine


def field_widths(machine: Machine) -> dict[str, int]:
    """The machine-derived widths (for docs and tools)."""
    return layout(machine).as_dict()


__all__ = ["ENCODING_VERSION", "DecodeError", "EncodeError", "encode_instruction",
           "encode_instructions", "decode_instructions", "decode_instruction_at",
           "instruction_bits", "field_widths", "layout", "HEADER_BITS", "OPCODE_BITS",
           "LENGTH_BITS"]
