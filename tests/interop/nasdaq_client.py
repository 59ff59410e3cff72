"""Nasdaq's own SoupBinTCP client (PyPI `nasdaq-protocols`) against the bourse gateway.

The OUCH 4.2 messages come from our `ouch42.xml`, turned into Python at run time by Nasdaq's
code generator (`nasdaq-ouch-codegen`) in a temporary directory, then imported. Everything on
the wire is therefore built and parsed by nasdaq-protocols: the Login Request (which it pads
on the right: sequence "1" + 19 spaces), the SoupBinTCP framing, client heartbeats, and each
OUCH message field by field.

Session: log in (sequence 1), expect System Event S; Enter NP1 (buy 100 AAPL 150.0000) ->
Accepted; Enter NP2 (sell 40 at the same price, same account) -> Accepted, Executed (taker),
Executed (maker NP1); Enter NP3 on an unknown symbol -> Rejected; Cancel NP1 -> Canceled 60;
stay idle 2 s (heartbeats both ways keep the session up); log out. Then log in again with
the session from Login Accepted and sequence 5 ("5" + 19 spaces): messages 5..7 are replayed.

Prints JSON: the Login Request bytes, the session and sequence from Login Accepted, every
message received with its decoded fields, and the same for the re-login.

usage: nasdaq_client.py HOST PORT USER PASSWORD
"""
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

from nasdaq_protocols import soup

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 5


def generate(out_dir):
    codegen = os.path.join(os.path.dirname(sys.executable), "nasdaq-ouch-codegen")
    subprocess.run(
        [codegen, "--spec-file", os.path.join(HERE, "ouch42.xml"), "--app-name", "ouch42",
         "--op-dir", out_dir, "--no-init-file"],
        check=True, stdout=subprocess.DEVNULL,
    )
    path = os.path.join(out_dir, "ouch_ouch42.py")
    spec = importlib.util.spec_from_file_location("ouch_ouch42", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fields(msg):
    out = {"type": type(msg).__name__}
    for f in type(msg).BodyRecord.Fields:
        out[f.name] = getattr(msg, f.name)
    return out


def build(cls, **values):
    """nasdaq-protocols messages are built empty, then their fields set by name."""
    msg = cls()
    for name, value in values.items():
        setattr(msg, name, value)
    return msg


def enter(ouch, token, side, shares, stock, price):
    return build(
        ouch.EnterOrder,
        order_token=token, buy_sell_indicator=side, shares=shares, stock=stock, price=price,
        time_in_force=99999, firm="", display="Y", capacity="A",
        intermarket_sweep_eligibility="N", minimum_quantity=0, cross_type="N",
        customer_type=" ",
    )


async def session(ouch, host, port, user, password):
    received = []

    async def recv(n):
        for _ in range(n):
            msg = await asyncio.wait_for(client.receive_message(), TIMEOUT)
            received.append(fields(msg))

    client = await ouch.connect_async(
        (host, port), user, password, "", sequence=1,
        client_heartbeat_interval=1, server_heartbeat_interval=3,
    )
    soup_session = client.soup_session
    login = {"session": str(soup_session.session_id.session),
             "sequence": soup_session.sequence + 1}
    await recv(1)
    client.send_message(enter(ouch, "NP1", "B", 100, "AAPL", 1_500_000))
    await recv(1)
    client.send_message(enter(ouch, "NP2", "S", 40, "AAPL", 1_500_000))
    await recv(3)
    client.send_message(enter(ouch, "NP3", "B", 100, "NOSUCH", 1_500_000))
    await recv(1)
    client.send_message(build(ouch.CancelOrder, order_token="NP1", shares=0))
    await recv(1)
    await asyncio.sleep(2)
    alive_after_idle = not client.closed
    soup_session.logout()
    last_seq = soup_session.sequence

    # Log in again asking for sequence 5 (sent as "5" + 19 spaces): the replay starts there.
    replayed = []
    for _ in range(50):
        try:
            again = await ouch.connect_async(
                (host, port), user, password, login["session"], sequence=5,
                client_heartbeat_interval=1, server_heartbeat_interval=3,
            )
            break
        except ConnectionRefusedError:  # the first connection may still be closing
            await asyncio.sleep(0.05)
    relogin = {"session": str(again.soup_session.session_id.session),
               "sequence": again.soup_session.sequence + 1}
    for _ in range(3):
        msg = await asyncio.wait_for(again.receive_message(), TIMEOUT)
        replayed.append(fields(msg))
    again.soup_session.logout()
    await asyncio.sleep(0.2)
    return login, received, alive_after_idle, last_seq, relogin, replayed


def main(host, port, user, password):
    with tempfile.TemporaryDirectory() as out_dir:
        ouch = generate(out_dir)
        login, received, alive, last_seq, relogin, replayed = asyncio.run(
            session(ouch, host, int(port), user, password))
    _, login_bytes = soup.LoginRequest(user, password, "", "1").to_bytes()
    print(json.dumps({
        "client": f"nasdaq-protocols {version('nasdaq-protocols')}",
        "login_request": login_bytes.decode("latin-1"),
        "login_accepted": login,
        "alive_after_idle": alive,
        "last_sequence": last_seq,
        "messages": received,
        "relogin_accepted": relogin,
        "replayed": replayed,
    }))


if __name__ == "__main__":
    main(*sys.argv[1:5])
