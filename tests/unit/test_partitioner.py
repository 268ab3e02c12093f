"""Peer X lives in partition murmur2(X) mod P, exactly as the Java client puts it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.log.jvm import jar_dir
from tidemark.log.partitioner import murmur2, partition_for, partition_for_peer

# (key, Utils.murmur2, Java default partition for 12 partitions), printed by
# org.apache.kafka.common.utils.Utils from kafka-clients 4.3.1.
JAVA_TABLE = [
    ("21", -973932308, 0), ("foobar", -790332482, 6), ("a-little-bit-long-string", -985981536, 8),
    ("peer-0", -818600454, 2), ("peer-1", 687036489, 9), ("peer-7", -1360842793, 7),
    ("peer-42", 1252617028, 4), ("peer-99", 836895694, 10), ("héllo", 614509002, 6),
    ("abc", 479470107, 3), ("x", 2121525046, 10), ("xy", -1884506471, 9),
    ("xyz", -2021271510, 2),
]


@pytest.mark.parametrize("key,hash_,partition", JAVA_TABLE)
def test_known_java_partitions(key: str, hash_: int, partition: int) -> None:
    assert murmur2(key.encode()) == hash_
    assert partition_for(key.encode(), 12) == partition
    assert partition_for_peer(key, 12) == partition


@given(st.text(min_size=1, max_size=30), st.integers(min_value=1, max_value=500))
def test_partition_in_range(key: str, partitions: int) -> None:
    assert 0 <= partition_for_peer(key, partitions) < partitions


_JAVA = """
import org.apache.kafka.common.utils.Utils;
import java.nio.charset.StandardCharsets;
public class Murmur { public static void main(String[] a) throws Exception {
  java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
  String line; while ((line = in.readLine()) != null) {
    System.out.println(Utils.toPositive(Utils.murmur2(line.getBytes(StandardCharsets.UTF_8))) % 12); } } }
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no java")
@settings(max_examples=1, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
                        min_size=1, max_size=40), min_size=200, max_size=200))
def test_agrees_with_the_java_client_on_random_keys(tmp_path_factory: pytest.TempPathFactory,
                                                    keys: list[str]) -> None:
    clients = sorted(jar_dir("kafka").glob("kafka-clients-*.jar"))
    if not clients:
        pytest.skip("kafka jars not fetched (run `make jars`)")
    src = Path(tmp_path_factory.mktemp("java")) / "Murmur.java"
    src.write_text(_JAVA)
    keys = [k.strip() or "k" for k in keys]
    out = subprocess.run(["java", "-cp", f"{jar_dir('kafka')}/*", str(src)], check=True,
                         input="\n".join(keys) + "\n", capture_output=True, text=True).stdout
    assert [int(x) for x in out.split()] == [partition_for_peer(k, 12) for k in keys]
