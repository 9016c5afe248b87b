"""Where a request ends in the bytes read so far (webhook/server/slow_clients.py RequestFramer), for a
chunked body that arrives in pieces."""

import pytest

from webhook.server.slow_clients import MAX_BODY, RequestFramer, TooLarge

HEAD = b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


def feed_in_pieces(data: bytes, piece: int) -> tuple[RequestFramer, list[bool]]:
    framer = RequestFramer()
    return framer, [framer.feed(data[i:i + piece]) for i in range(0, len(data), piece)]


def test_a_large_chunk_read_in_pieces_is_counted_once():
    size = 4 << 20  # over half the limit: counted twice, it would pass MAX_BODY
    request = HEAD + b"%x\r\n" % size + b"x" * size + b"\r\n0\r\n\r\n"
    framer, done = feed_in_pieces(request, 16384)
    assert done[-1] and not any(done[:-1])
    assert framer.end == len(request)


@pytest.mark.parametrize("piece", [16384, 1 << 20])
def test_chunks_past_the_limit_are_too_large_however_they_arrive(piece):
    chunk = 1 << 20
    body = (b"%x\r\n" % chunk + b"x" * chunk + b"\r\n") * (MAX_BODY // chunk + 1)
    with pytest.raises(TooLarge):
        feed_in_pieces(HEAD + body, piece)
