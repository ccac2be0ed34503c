"""A field of ferry.Options given a value of the wrong type says so in one
short line: which field, what it takes, and what it got (issue 59: before,
ferry.Engine(chunk_bytes="1M") raised pybind11's "incompatible function
arguments" with the whole Options repr)."""

import numpy as np
import pytest

import ferry


def test_a_size_given_as_text_names_the_field_and_the_value():
    with pytest.raises(TypeError) as e:
        ferry.Engine(chunk_bytes="1M")
    assert str(e.value) == "chunk_bytes must be an int (bytes), got str '1M'"


@pytest.mark.parametrize("field, value, message", [
    ("window", 2.5, "window must be an int, got float 2.5"),
    ("streams", "4", "streams must be an int, got str '4'"),
    ("inline_max", True, "inline_max must be an int (bytes), got bool True"),
    ("socket_buffer_bytes", None, "socket_buffer_bytes must be an int (bytes), got NoneType None"),
    ("listen", 7000, "listen must be a str, got int 7000"),
    ("local_same_process", "yes", "local_same_process must be a bool, got str 'yes'"),
])
def test_wrong_types_in_one_line(field, value, message):
    with pytest.raises(TypeError) as e:
        ferry.make_options(**{field: value})
    assert str(e.value) == message
    with pytest.raises(TypeError) as e:
        setattr(ferry.Options(), field, value)
    assert str(e.value) == message


def test_a_long_value_is_cut_short():
    with pytest.raises(TypeError) as e:
        ferry.make_options(chunk_bytes="x" * 1000)
    assert len(str(e.value)) < 120, str(e.value)
    assert "Options(" not in str(e.value)


def test_out_of_range_for_the_field():
    with pytest.raises(ValueError) as e:
        ferry.make_options(chunk_bytes=-1)
    assert str(e.value) == "chunk_bytes must be an int (bytes) from 0 to 18446744073709551615, got -1"
    with pytest.raises(ValueError) as e:
        ferry.make_options(window=1 << 40)
    assert str(e.value) == "window must be an int from -2147483648 to 2147483647, got 1099511627776"


def test_right_types_still_work():
    o = ferry.make_options(chunk_bytes=np.int64(1 << 20), window=8, listen="127.0.0.1:0", local_same_process=True,
                           streams=-1)  # out of range for validate(), not for the field
    assert (o.chunk_bytes, o.window, o.listen, o.local_same_process, o.streams) == (1 << 20, 8, "127.0.0.1:0", True, -1)
    assert isinstance(o.chunk_bytes, int) and isinstance(o.local_same_process, bool)
