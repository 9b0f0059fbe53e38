// Asio's SSL implementation, compiled once (BOOST_ASIO_SEPARATE_COMPILATION); only http/ uses TLS.
#include <boost/asio/ssl/impl/src.hpp>
