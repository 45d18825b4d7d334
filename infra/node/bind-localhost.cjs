// Preloaded into third-party servers the tests start (node --require): a
// listen() call without a host binds 127.0.0.1 instead of every interface.
// server-everything calls app.listen(PORT) with no host and has no option.
const net = require('net');
const HOST = '127.0.0.1';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if ((typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) && typeof args[1] !== 'string') {
    args.splice(1, 0, HOST);
  } else if (first && typeof first === 'object' && !first.path && first.host === undefined) {
    args[0] = { ...first, host: HOST };
  }
  return listen.apply(this, args);
};
