// Preloaded into the Node processes the tests start (node --require): a
// server that listens without an address binds 127.0.0.1 instead of every
// interface. server-everything calls app.listen(PORT) with no host and has
// no option; the conformance suite's scenario servers call listen(0) and
// read their port back at once. So the bind itself is redirected, where
// Node binds a listen without an address ('::', or '0.0.0.0' where IPv6 is
// refused), and listen() keeps its own timing.
const { TCP } = process.binding('tcp_wrap');
const HOST = '127.0.0.1';
const bind = TCP.prototype.bind;
const bind6 = TCP.prototype.bind6;
TCP.prototype.bind6 = function (address, port, flags) {
  return address === '::' ? bind.call(this, HOST, port) : bind6.call(this, address, port, flags);
};
TCP.prototype.bind = function (address, port) {
  return bind.call(this, address === '0.0.0.0' ? HOST : address, port);
};
